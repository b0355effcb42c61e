"""`flud init`, `flud ls` and `flud key export` say until when the nodes keep
this home's data (flud/client/lease_renewal.py): no network needed."""
import json
import time

from flud.cli.main import build_parser
from flud.client.home import ClientHome
from flud.client.lease_renewal import DAY, META, META_LEASE

RENEWED = 1_800_000_000.0


def run(*argv) -> int:
    args = build_parser().parse_args([str(a) for a in argv])
    return args.handler(args)


def day(t) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t))


def test_init_ls_and_key_export_say_until_when(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    assert run("init", "--home", home, "--join", "127.0.0.1:1") == 0
    said = capsys.readouterr().out
    assert "the nodes keep your data for their lease (a year by default)" in said
    assert run("ls", "--home", home) == 0
    assert "leases: not renewed yet" in capsys.readouterr().out
    index = ClientHome(str(home)).index
    index.set_meta(META, RENEWED)
    index.set_meta(META_LEASE, 200 * DAY)
    index.close()
    until = day(RENEWED + 200 * DAY)
    assert run("ls", "--home", home) == 0
    assert f"until at least {until}" in capsys.readouterr().out
    assert run("ls", "--home", home, "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["leases"] == {"renewed": RENEWED, "lease_seconds": 200 * DAY,
                                 "kept_until": RENEWED + 200 * DAY}
    monkeypatch.setenv("FLUD_PASSPHRASE", "correct horse")
    assert run("key", "export", "--home", home, tmp_path / "key.flud") == 0
    assert f"until at least {until}" in capsys.readouterr().out
    assert run("init", "--home", tmp_path / "new", "--join", "127.0.0.1:1",
               "--import-key", tmp_path / "key.flud") == 0
    assert "restore now" in capsys.readouterr().out
