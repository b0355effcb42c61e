"""Repair with real node processes (issue 20): a backup to a 16-node testnet;
holders are stopped for good one at a time, each time followed by the check
the agent runs (`flud check --repair`); after three times n-k of them are
gone (more than the code survives without repair), a restore is
byte-identical, and so is a restore from the key alone in a new home.

2-of-4 here: with 4-of-8, three times n-k is twelve of sixteen nodes, and
the four left could not hold an object's eight shares whatever repair did.
"""
import signal

import pytest

from tests.integration.helpers import (compare_trees, flud, init_client, output,
                                       write_random)

pytestmark = pytest.mark.integration

NODES = 16
K, N = 2, 4
PASSPHRASE = "correct horse battery staple"


def _busiest(net, gone) -> int:
    """The index of the live node holding the most bytes (this client is the only owner)."""
    rows = {row["pid"]: row["stats"] for row in net.stats() if row["stats"]}
    best, most = None, -1
    for index, node in enumerate(net.nodes):
        if index in gone or index == 0 or node["pid"] not in rows:
            continue   # node 0 answers the member list for every client
        stored = rows[node["pid"]]["store"]["bytes_stored"]
        if stored > most:
            best, most = index, stored
    return best


def test_holders_stopped_one_at_a_time_are_repaired(testnet_factory, tmp_path):
    net = testnet_factory(NODES)
    src = tmp_path / "src"
    for i in range(30):
        write_random(src / "docs" / f"note-{i}.txt", 200 + 700 * i, i)
    write_random(src / "media" / "film.bin", 6 * 1024 * 1024, 99)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", str(K), "--n", str(N))
    proc = flud("backup", src, "--home", home)
    assert proc.returncode == 0, output(proc)
    gone, recreated = set(), 0
    for _ in range(3 * (N - K)):
        victim = _busiest(net, gone)
        net.stop(victim, signal.SIGKILL)
        gone.add(victim)
        check = flud("check", "--home", home, "--repair", "--unreachable-grace", "0")
        assert check.returncode in (0, 1), output(check)
        assert " 0 lost" in check.stdout, output(check)
        line = next(x for x in check.stdout.splitlines() if x.startswith("objects:"))
        recreated += int(line.split("re-created ")[1].split()[0])
    assert recreated > 3 * (N - K), recreated
    # every object keeps at least m = n - 1 of its shares (one lost share is
    # degraded, repaired at the second)
    final = flud("check", "--home", home, "--unreachable-grace", "0")
    assert " 0 lost" in final.stdout, output(final)
    assert "(1 healthy" not in final.stdout and "(2 healthy" not in final.stdout, output(final)
    proc = flud("restore", "--home", home, "--to", tmp_path / "dest")
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, tmp_path / "dest" / "src") == []
    # a total loss: the key alone, a node that is still up
    keyfile = tmp_path / "flud.key"
    env = {"FLUD_PASSPHRASE": PASSPHRASE}
    proc = flud("key", "export", "--home", home, keyfile, env=env)
    assert proc.returncode == 0, output(proc)
    new_home = tmp_path / "new-home"
    proc = flud("init", "--home", new_home, "--import-key", keyfile, "--join", net.addr(0),
                "--k", str(K), "--n", str(N), env=env)
    assert proc.returncode == 0, output(proc)
    proc = flud("restore", "--home", new_home, "--to", tmp_path / "dest2")
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, tmp_path / "dest2" / "src") == []
