"""Holders that come back at another address (a new port, as after a
router's reboot) are found by id: their restarted node signs a new record
with a higher sequence, gossip carries it, the client takes it from the
bootstrap nodes, and check sees every share where the holder map says
(issue 30: signed node records; finding 3)."""
import json
import os
import time

import pytest

from tests.integration.helpers import (NodeProcess, compare_trees, flud, init_client, output,
                                       write_random)

pytestmark = pytest.mark.integration
MOVED = (3, 4, 5)


def check(home):
    proc = flud("check", "--home", home, "--json", "--unreachable-grace", "0")
    lines = proc.stdout.strip().splitlines()
    assert lines, output(proc)
    return proc.returncode, json.loads(lines[-1])


def test_holders_that_moved_are_found_by_their_new_records(testnet_factory, tmp_path):
    net = testnet_factory(10)
    home = str(tmp_path / "home")
    init_client(home, net)
    src = tmp_path / "src"
    for i in range(12):
        write_random(src / f"d{i % 3}" / f"f{i}.bin", 2000 + 997 * i, seed=i)
    write_random(src / "big.bin", 3 * 1024 * 1024, seed=99)
    proc = flud("backup", str(src), "--home", home)
    assert proc.returncode == 0, output(proc)
    code, before = check(home)
    assert code == 0 and before["counts"]["degraded"] == 0, before["counts"]

    old_ports = {}
    for index in MOVED:
        old_ports[index] = net.nodes[index]["port"]
        net.stop(index)
    for index in MOVED:             # same home (same key), a port the OS picks
        node = NodeProcess(net.nodes[index]["home"], port=0, join=net.addr(0))
        net.started.append(node)
        info = node.wait_ready()
        assert info["port"] != old_ports[index]
        net.restarted[index] = node

    # A home made from the key alone, at once (before gossip has spread the
    # new records): it knows the holders by the ids its manifest names and
    # finds each by FIND_NODE lookups where a bootstrap's list is stale.
    env = {"FLUD_PASSPHRASE": "moved holders"}
    keyfile = tmp_path / "flud.key"
    proc = flud("key", "export", "--home", home, keyfile, env=env)
    assert proc.returncode == 0, output(proc)
    new_home = tmp_path / "new-home"
    proc = flud("init", "--home", new_home, "--import-key", keyfile, "--join", net.addr(0),
                env=env)
    assert proc.returncode == 0, output(proc)
    out = tmp_path / "from-key"
    proc = flud("restore", "--home", new_home, "--to", str(out), env=env)
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, os.path.join(str(out), "src")) == []

    # testnet.json still lists the old ports: only the records can say where
    # the moved holders are now. Gossip needs a few rounds.
    deadline = time.monotonic() + 40
    while True:
        code, after = check(home)
        if code == 0 and after["counts"]["degraded"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert code == 0 and after["counts"]["degraded"] == 0, after["counts"]

    out = tmp_path / "out"
    proc = flud("restore", "--home", home, "--to", str(out))
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, os.path.join(str(out), "src")) == []
