"""`flud friends` in-process (no node needed): add, list, revoke, only; a
forged certificate refused with a stable code (docs/trust.md)."""
import json

import pytest

from flud.cli.main import main

NODE = "ab" * 32


@pytest.fixture
def homes(tmp_path):
    from flud.client.home import create_home
    for name in ("mine", "other"):
        create_home(str(tmp_path / name), join=("127.0.0.1", 1)).close()
    return str(tmp_path / "mine"), str(tmp_path / "other")


def _certificate(out: str) -> str:
    return out.split("certificate: ")[1].split()[0]


def test_a_forged_certificate_is_refused_with_a_stable_code(homes, capsys):
    mine, other = homes
    assert main(["friends", "add", "--home", other, NODE]) == 0
    foreign = _certificate(capsys.readouterr().out)
    assert main(["friends", "add", "--home", mine, "--certificate", foreign]) == 2
    assert "[CERTIFICATE_WRONG_ISSUER]" in capsys.readouterr().err
    assert main(["friends", "add", "--home", mine, NODE]) == 0
    own = _certificate(capsys.readouterr().out)
    flipped = own[:-4] + ("0000" if own[-4:] != "0000" else "1111")
    assert main(["friends", "add", "--home", mine, "--certificate", flipped]) == 2
    assert "[CERTIFICATE_BAD_SIGNATURE]" in capsys.readouterr().err
    assert main(["friends", "add", "--home", mine, "--certificate", own]) == 0   # its own: fine


def test_add_list_revoke_only(homes, capsys):
    mine, _ = homes
    assert main(["friends", "add", "--home", mine, NODE, "--name", "alice"]) == 0
    assert main(["friends", "add", "--home", mine, "not-a-node"]) == 2
    assert main(["friends", "only", "--home", mine, "on"]) == 0
    capsys.readouterr()
    assert main(["friends", "list", "--home", mine, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["friends_only"] is True
    assert [(f["node_id"], f["name"], f["valid"]) for f in listed["friends"]] == \
        [(NODE, "alice", True)]
    assert main(["friends", "revoke", "--home", mine, NODE]) == 0
    capsys.readouterr()
    assert main(["friends", "list", "--home", mine, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["friends"] == []
