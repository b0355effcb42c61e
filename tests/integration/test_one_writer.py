"""One key, one writer (issue 25, finding 7), with real node processes: a
home made from the exported key reads but is refused when it writes, until
`flud adopt`; from then on the home it replaced is refused."""
import json

import pytest

from tests.integration.helpers import flud, init_client, output, write_random

pytestmark = pytest.mark.integration

NODES = 8
ENV = {"FLUD_PASSPHRASE": "correct horse battery staple"}


def _refused(proc, code):
    assert proc.returncode == 2, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)
    record = json.loads(proc.stdout.splitlines()[-1])
    assert record["error"]["code"] == code, output(proc)
    return record["error"]["message"]


def test_a_second_home_with_the_key_is_refused_until_it_adopts(testnet_factory, tmp_path):
    net = testnet_factory(NODES, "one-writer")
    src = tmp_path / "src"
    for i in range(6):
        write_random(src / f"f{i}.bin", 2000 + 100 * i, i)
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    init_client(home_a, net, None, "--k", "2", "--n", "4")
    proc = flud("backup", src, "--home", home_a)
    assert proc.returncode == 0 and "snapshot 1:" in proc.stdout, output(proc)
    keyfile = tmp_path / "flud.key"
    proc = flud("key", "export", "--home", home_a, keyfile, env=ENV)
    assert proc.returncode == 0, output(proc)
    proc = flud("init", "--home", home_b, "--import-key", keyfile, "--testnet", net.dir,
                "--k", "2", "--n", "4", env=ENV)
    assert proc.returncode == 0 and "flud adopt" in proc.stdout, output(proc)

    # B reads, but its backup is refused, with what happened and what to do
    proc = flud("ls", "--home", home_b, "--remote")
    assert proc.returncode == 0 and "snapshot    1" in proc.stdout, output(proc)
    proc = flud("backup", src, "--home", home_b, "--json")
    message = _refused(proc, "OTHER_WRITER")
    assert "another home" in message and f"flud adopt --home {home_b}" in message, message

    # B adopts, and backs up: snapshot 2 (the head's ids go on)
    proc = flud("adopt", "--home", home_b, "--json")
    assert proc.returncode == 0, output(proc)
    assert json.loads(proc.stdout.splitlines()[-1])["snapshots"] == [1]
    write_random(src / "from-b.bin", 3000, 50)
    proc = flud("backup", src, "--home", home_b)
    assert proc.returncode == 0 and "snapshot 2:" in proc.stdout, output(proc)

    # A's next backup, and its prune, are refused; nothing of B's is lost
    write_random(src / "from-a.bin", 3000, 60)
    proc = flud("backup", src, "--home", home_a, "--json")
    message = _refused(proc, "OTHER_WRITER")
    assert f"flud adopt --home {home_a}" in message, message
    proc = flud("prune", "--home", home_a, "--grace", "0", "--json")
    _refused(proc, "OTHER_WRITER")
    proc = flud("restore", "--home", home_b, "--to", tmp_path / "out")
    assert proc.returncode == 0, output(proc)
    assert (tmp_path / "out" / "src" / "from-b.bin").exists()
