"""The DHT between real node processes (issue 30, discovery): a client that
knows a holder by id only finds it by FIND_NODE lookups after it moved, and
a hostile bootstrap answering with nodes it made up cannot confine a
client to them."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import NodeProcess, ROOT, wait_until

pytestmark = pytest.mark.integration
TOOL = os.path.join(os.path.dirname(__file__), "dht_tool.py")
PYTHON = sys.executable


def dht_tool(*args, timeout=60.0):
    proc = subprocess.run([PYTHON, TOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0 and lines, f"dht_tool {args[0]} failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1])


def test_a_moved_node_is_found_by_its_id(testnet_factory, tmp_path):
    net = testnet_factory(6)
    moved = 4
    node_id = net.nodes[moved]["node_id"]
    old_port = net.nodes[moved]["port"]
    net.stop(moved)
    node = NodeProcess(net.nodes[moved]["home"], port=0, join=net.addr(0))
    net.started.append(node)
    new_port = node.wait_ready()["port"]
    assert new_port != old_port
    # The client knows node 1's address and the moved node's id, nothing
    # else: FIND_NODE lookups find it where its newest record says, once
    # the nodes near it took that record (its rejoin lookup tells them).
    home = str(tmp_path / "client")

    def found():
        answer = dht_tool("locate", home, net.addr(1), node_id)
        return answer["found"] == f"127.0.0.1:{new_port}" and answer["lookups"] >= 1
    wait_until(found, 30, "a lookup to find the moved node at its new port", interval=1.0)


def test_a_hostile_bootstrap_cannot_confine_a_client(testnet_factory, tmp_path):
    net = testnet_factory(5)
    portfile = str(tmp_path / "hostile.port")
    hostile = subprocess.Popen([PYTHON, TOOL, "hostile", str(tmp_path / "hostile"), portfile, "40"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: os.path.exists(portfile), 20, "the hostile bootstrap to listen")
        with open(portfile) as f:
            hostile_addr = f"127.0.0.1:{f.read().strip()}"
        # The hostile bootstrap is asked first, beside one honest node.
        answer = dht_tool("discover", str(tmp_path / "client"), hostile_addr, net.addr(2))
        honest = {n["node_id"] for n in net.nodes}
        assert honest <= set(answer["known"]), answer
        assert honest <= set(answer["answered"]), "the random walks reached every honest node"
        assert honest <= set(answer["found"]), "a lookup of each honest id found it"
        # none of the 40 made-up ids answered or was found (nobody holds them)
        assert set(answer["answered"]) <= honest and set(answer["found"]) <= honest
    finally:
        hostile.send_signal(signal.SIGKILL)
        hostile.wait(timeout=10)
