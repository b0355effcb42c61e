"""`flud testnet up|status|down` and `flud node run` with real processes."""
import json
import os
import re
import signal
import socket
import time

import pytest

from tests.integration.helpers import (Testnet, flud, flud_popen, is_alive, output,
                                       processes_mentioning, tool, wait_gone, wait_until)

pytestmark = pytest.mark.integration

ROW = re.compile(r"^\s*(\d+)\s+([0-9a-f]{12})\s+(\d+)\s+(\d+)\s+(yes|no)\b(.*)$")


def status_rows(text: str) -> list:
    """[(index, port, pid, alive, peers or None)] from `flud testnet status`."""
    rows = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rest = m.group(6).split()
            peers = int(rest[0]) if m.group(5) == "yes" and rest else None
            rows.append((int(m.group(1)), int(m.group(3)), int(m.group(4)),
                         m.group(5) == "yes", peers))
    return rows


def test_fifty_nodes_up_status_down(tmp_path_factory):
    net = Testnet(tmp_path_factory.mktemp("fifty"))
    try:
        started = time.monotonic()
        proc = net.up(50, timeout=120)
        took = time.monotonic() - started
        assert proc.returncode == 0, output(proc)
        assert "every node joined the DHT" in proc.stdout

        nodes = net.nodes
        assert len(nodes) == 50
        assert len({n["port"] for n in nodes}) == 50
        assert len({n["pid"] for n in nodes}) == 50
        assert len({n["node_id"] for n in nodes}) == 50
        for n in nodes:
            assert re.fullmatch(r"[0-9a-f]{64}", n["node_id"])
            assert n["host"] == "127.0.0.1" and 0 < n["port"] < 65536
            assert is_alive(n["pid"], n["start"]), f"node {n['pid']} is not running"
            assert os.path.isdir(n["home"]) and os.path.exists(os.path.join(n["home"], "node.log"))

        status = flud("testnet", "status", "--dir", net.dir, timeout=60)
        assert status.returncode == 0, output(status)
        rows = status_rows(status.stdout)
        assert len(rows) == 50, status.stdout
        assert sorted(r[1] for r in rows) == sorted(n["port"] for n in nodes)
        # ready means joined (a routing table of k = 20), not a full view
        assert [r for r in rows if not r[3] or r[4] < 20] == [], status.stdout
        assert "50 of 50 nodes alive" in status.stdout

        # `up` again on the running directory: refused, nothing more started.
        before = set(processes_mentioning(net.dir))
        again = net.up(50, timeout=60)
        assert again.returncode != 0, output(again)
        assert "already running" in again.stdout + again.stderr
        assert set(processes_mentioning(net.dir)) <= before
        assert [n["pid"] for n in net.nodes] == [n["pid"] for n in nodes]

        down = flud("testnet", "down", "--dir", net.dir, timeout=60)
        assert down.returncode == 0, output(down)
        assert "stopped 50 node process(es)" in down.stdout
        # down waits: nothing may be left the moment it returns.
        still = [n["pid"] for n in nodes if is_alive(n["pid"], n["start"])]
        assert still == []
        # A stopped node may stay a zombie until init reaps it (it was
        # reparented when the launcher exited); it must vanish soon after.
        wait_until(lambda: not any(_pid_exists(n["pid"]) for n in nodes), 15,
                   "init to reap the stopped nodes")
        for n in nodes:
            assert not os.path.exists(os.path.join(n["home"], "node.json")), \
                "a node stopped by `down` did not shut down cleanly"
        after = flud("testnet", "status", "--dir", net.dir, timeout=60)
        assert after.returncode != 0
        assert "0 of 50 nodes alive" in after.stdout
        print(f"50-node testnet up in {took:.1f} s")
    finally:
        net.cleanup()


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("taken_offset", [0, 2], ids=["first-node", "third-node"])
def test_port_taken_fails_clearly_and_leaves_nothing(tmp_path, taken_offset):
    blocker = socket.socket()
    try:
        for _ in range(50):  # bounded: find base..base+offset with only the last one taken
            blocker.bind(("127.0.0.1", 0))
            taken = blocker.getsockname()[1]
            base = taken - taken_offset
            if base > 1024 and all(_port_is_free(base + i) for i in range(taken_offset)):
                break
            blocker.close()
            blocker = socket.socket()
        else:
            pytest.skip("no suitable free port range")
        blocker.listen(1)
        directory = tmp_path / "net"
        net = Testnet(directory)
        try:
            proc = net.up(4, "--base-port", base, timeout=60)
            text = proc.stdout + proc.stderr
            assert proc.returncode != 0, output(proc)
            assert "did not start" in text, output(proc)
            assert str(taken) in text and "in use" in text.lower(), \
                f"the message does not say which port is taken:\n{output(proc)}"
            # nothing left running, nothing recorded as running
            assert processes_mentioning(str(directory)) == []
            assert not os.path.exists(directory / "testnet.json") or net.nodes == []
        finally:
            net.cleanup()
    finally:
        blocker.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_node_run_foreground_stops_cleanly(node_factory, sig):
    node = node_factory("solo")
    info = node.info
    assert info["pid"] == node.pid and info["port"] > 0
    # the node replaced its interpreter by a lean one (-OO), keeping its pid
    with open(f"/proc/{node.pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[1] == b"-OO"
    home = node.home
    assert oct(os.stat(os.path.join(home, "identity.pem")).st_mode & 0o777) == "0o600"
    wait_until(lambda: "listening on" in open(os.path.join(home, "node.log")).read(), 10,
               "the node to log that it listens")
    started = time.monotonic()
    code = node.stop(sig, timeout=10)
    assert code == 0, f"exit code {code} after {sig!r}:\n{node.log_tail()}"
    assert time.monotonic() - started < 10
    assert not os.path.exists(os.path.join(home, "node.json"))
    with open(os.path.join(home, "node.log")) as f:
        log = f.read()
    assert "node stopped" in log
    assert info["node_id"][:16] in log


def _peer_ids(addr, client_home):
    answer = tool("peers", addr, client_home)
    return {p["node_id"]: p["alive"] for p in answer["peers"]
            if p["node_id"] != answer["node_id"]}


def test_losing_the_join_node_does_not_stop_later_joins(node_factory, tmp_path):
    client = str(tmp_path / "client")
    a = node_factory("a")
    b = node_factory("b", join=a.addr)
    d = node_factory("d", join=a.addr)
    ids = {name: node.info["node_id"] for name, node in (("a", a), ("b", b), ("d", d))}
    wait_until(lambda: {ids["a"], ids["d"]} <= set(_peer_ids(b.addr, client)), 20,
               "b to learn a and d")

    assert a.stop(signal.SIGKILL) != 0
    c = node_factory("c", join=b.addr)
    wait_until(lambda: {ids["b"], ids["d"]} <= set(_peer_ids(c.addr, client)), 20,
               "c (joined through b after a died) to learn b and d")
    # no node is special: d, which joined through the dead a, learns c too
    wait_until(lambda: c.info["node_id"] in _peer_ids(d.addr, client), 20, "d to learn c")


def test_dead_peer_is_marked(testnet_factory):
    net = testnet_factory(3)
    before = net.stats()
    assert [(s["stats"]["peers_known"], s["stats"]["peers_alive"]) for s in before] == [(2, 2)] * 3
    net.stop(2, signal.SIGKILL)

    def marked():
        rows = net.stats()
        assert rows[2]["stats"] is None
        seen = [(r["stats"]["peers_known"], r["stats"]["peers_alive"]) for r in rows[:2]]
        assert all(known == 2 for known, _ in seen), f"a dead peer was forgotten: {seen}"
        return any(alive == 1 for _, alive in seen)

    wait_until(marked, 45, "a surviving node to mark the killed node dead", interval=0.5)


def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path):
    """`flud testnet up | head -1`: exit 141 (SIGPIPE's code), no traceback,
    and the nodes it started are up and can be stopped."""
    directory = tmp_path / "tn"
    with open(tmp_path / "stderr", "w") as err:
        proc = flud_popen("testnet", "up", "--nodes", "3", "--dir", directory, stderr=err)
    try:
        first = proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = (tmp_path / "stderr").read_text()
    try:
        assert "ready" in first
        # 141 (SIGPIPE's code) when the reader closed before the last line;
        # forked nodes say when they joined, so the command may have written
        # everything and ended first (0)
        assert code in (141, 0), stderr
        assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
        assert len(status_rows(flud("testnet", "status", "--dir", directory).stdout)) == 3
    finally:
        stopped = flud("testnet", "down", "--dir", directory)
    assert stopped.returncode == 0, output(stopped)
    assert processes_mentioning(str(directory)) == []
