"""Friends' grids and reputation with real node processes (issue 31): a
home that keeps to friends places only on the nodes its user key
certified; a friend's node is certified by a short code over a
magic-wormhole mailbox run here, on 127.0.0.1; check --repair moves every
share off a node that failed VERIFY. (A forged certificate:
tests/unit/cli/test_friends_cli.py, in-process.)"""
import json
import os
import signal
import socket
import subprocess

import pytest

from tests.integration.helpers import (
    PYTHON, ROOT, flud, flud_popen, init_client, output, wait_until, write_random)

pytestmark = pytest.mark.integration

K, N = 2, 3


def _bytes_held(net) -> dict:
    return {row["node_id"]: row["stats"]["store"]["bytes_stored"] for row in net.stats()}


@pytest.fixture(scope="module")
def net(module_testnet_factory):
    """Six nodes shared by the tests here (each with its own home)."""
    return module_testnet_factory(6, name="friends")


def test_a_friends_only_home_stores_on_certified_nodes_only(net, tmp_path):
    home = str(tmp_path / "home")
    init_client(home, net, None, "--k", str(K), "--n", str(N))
    friends = [net.nodes[i] for i in (1, 2, 4)]
    for node in friends:
        proc = flud("friends", "add", "--home", home, "--node-home", node["home"])
        assert proc.returncode == 0, output(proc)
    proc = flud("friends", "only", "--home", home, "on")
    assert proc.returncode == 0 and "3 certified" in proc.stdout, output(proc)

    before = _bytes_held(net)
    src = tmp_path / "src"
    write_random(src / "big.bin", 3 * 1024 * 1024, 7)
    for i in range(30):
        (src / f"small{i}.txt").write_text(f"file {i}\n" * (i + 1))
    proc = flud("backup", "--home", home, str(src))
    assert proc.returncode == 0, output(proc)
    held = _bytes_held(net)
    certified = {node["node_id"] for node in friends}
    assert all(held[nid] > before[nid] for nid in certified), (before, held)
    assert all(held[nid] == before[nid] for nid in held if nid not in certified), (before, held)

    # revoked: a backup that needs n = 3 friends now says so, and stores nothing
    proc = flud("friends", "revoke", "--home", home, friends[0]["node_id"])
    assert proc.returncode == 0, output(proc)
    (src / "new.txt").write_text("more\n")
    proc = flud("backup", "--home", home, str(src))
    assert proc.returncode != 0 and "certified" in proc.stderr, output(proc)
    listed = json.loads(flud("friends", "list", "--home", home, "--json").stdout)
    assert listed["friends_only"] and len(listed["friends"]) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mailbox(tmp_path):
    """A magic-wormhole mailbox server on 127.0.0.1, stopped at the end."""
    pytest.importorskip("wormhole_mailbox_server",
                        reason="needs magic-wormhole-mailbox-server (the test extra)")
    port = _free_port()
    twist = os.path.join(os.path.dirname(PYTHON), "twist")
    proc = subprocess.Popen([twist, "wormhole-mailbox", f"--port=tcp:{port}:interface=127.0.0.1",
                             f"--channel-db={tmp_path / 'mailbox.sqlite'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        def listening():
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        wait_until(listening, 20, "the wormhole mailbox to listen")
        yield f"ws://127.0.0.1:{port}/v1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_an_invite_by_code_certifies_the_friends_node(net, tmp_path, mailbox):
    home = str(tmp_path / "home")
    init_client(home, net)
    node = net.nodes[0]
    invite = flud_popen("friends", "invite", "--node-home", node["home"], "--mailbox", mailbox,
                        "--timeout", "60")
    try:
        line = invite.stdout.readline()
        assert line.startswith("invite code: "), line + invite.stderr.read()
        code = line.split(": ", 1)[1].strip()
        assert len(code.split("-")) == 3      # "7-guitarist-revenge"
        proc = flud("friends", "accept", "--home", home, code, "--mailbox", mailbox,
                    "--timeout", "60")
        assert proc.returncode == 0, output(proc)
        assert node["node_id"] in proc.stdout
        rest, err = invite.communicate(timeout=30)
        assert invite.returncode == 0, err
        assert "accepted" in rest
    finally:
        if invite.poll() is None:
            invite.kill()
            invite.wait(10)
    listed = json.loads(flud("friends", "list", "--home", home, "--json").stdout)
    assert [f["node_id"] for f in listed["friends"] if f["valid"]] == [node["node_id"]]
    with open(os.path.join(home, "config.json")) as f:
        assert [node["host"], node["port"]] in json.load(f)["bootstrap"]


def _check_summary(home, *extra):
    proc = flud("check", "--home", home, "--json", *extra)
    return proc, json.loads(proc.stdout.splitlines()[-1])


def test_check_repair_moves_every_share_off_a_node_that_failed_verify(net, tmp_path):
    """Reputation: one share found corrupt on a node that holds few sinks its
    score (this home saw it lose one share in a handful), and check --repair
    moves its good shares too, not only the corrupt one."""
    home = str(tmp_path / "home")
    init_client(home, net, None, "--k", "2", "--n", "4")   # check needs n - k >= 2

    def share_files(node):
        root = os.path.join(node["home"], "store", "shares")
        return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}
    others = {node["node_id"]: share_files(node) for node in net.nodes}   # other homes'
    src = tmp_path / "src"
    write_random(src / "big.bin", 2 * 1024 * 1024, 11)
    (src / "small.txt").write_text("small\n")
    proc = flud("backup", "--home", home, str(src))
    assert proc.returncode == 0, output(proc)
    # the node holding the most of this home's standalone shares (extent streams)
    mine = {node["node_id"]: sorted(share_files(node) - others[node["node_id"]])
            for node in net.nodes}
    victim = max(mine, key=lambda nid: len(mine[nid]))
    path = mine[victim][0]
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        for i in range(0, len(data), 1024):      # any challenged range sees it
            data[i] ^= 0xFF
        f.seek(0)
        f.write(data)
    proc, first = _check_summary(home)           # a first check: every share challenged
    assert {n["node"]: n["corrupt"] for n in first["nodes"]}[victim] == 1, output(proc)
    held = {n["node"]: n["shares"] for n in first["nodes"]}
    assert held[victim] >= 2, held
    proc, repaired = _check_summary(home, "--repair")
    assert proc.returncode in (0, 1), output(proc)
    _, after = _check_summary(home)
    left = {n["node"]: n["shares"] for n in after["nodes"]}
    assert left.get(victim, 0) == 0, after["nodes"]          # all of its shares moved
    counts = after["counts"]
    assert counts["healthy"] > 0 and counts["degraded"] == counts["at_risk"] == \
        counts["unavailable"] == counts["lost"] == 0, counts
