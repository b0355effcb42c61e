"""Helpers of the integration tests: real node processes on 127.0.0.1,
started and always reaped.

Every testnet a test starts is stopped by its fixture's finalizer, even when
the test fails: `flud testnet down`, then SIGKILL for any process still alive
that the test started (pids from testnet.json, nodes the test restarted, and
any process whose command line names the test's own temporary directory).
The Twisted reactor cannot be restarted, so nothing here runs one: every
exchange with a node goes through `flud` or tests/integration/peer_tool.py in
a subprocess, each with a hard timeout. Starting, watching and stopping node
processes is the testnet harness's (flud/testnet/launch.py), as for the CLI.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
PEER_TOOL = os.path.join(HERE, "peer_tool.py")

# Tools shared between projects, kept beside the repository (FLUD_SHARED: elsewhere)
SHARED = os.environ.get("FLUD_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")

COMMAND_TIMEOUT = 180.0     # any single flud command
READY_TIMEOUT = 30.0        # a node writing node.json
STOP_TIMEOUT = 20.0         # a process going away after a signal
POLL = 0.05

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from flud import procfs  # noqa: E402
from flud.testnet import launch  # noqa: E402
# That very process exists and is not a zombie (pid + start time); processes
# whose command line names a path: what the tests reap by.
from flud.testnet.launch import is_running as is_alive  # noqa: E402


# ---- processes ----------------------------------------------------------------

def processes_mentioning(text: str) -> list:
    """[(pid, start)] of the running processes (but this one) whose command
    line contains text."""
    me = os.getpid()
    found = []
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        if pid == me or text not in (procfs.command_line(pid) or ""):
            continue
        start = procfs.start_ticks(pid)
        if start is not None and is_alive(pid, start):
            found.append((pid, start))
    return found


def wait_until(predicate, timeout, what, interval=POLL):
    """Poll predicate() until it is truthy; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_gone(procs, timeout=STOP_TIMEOUT) -> list:
    """procs: [(pid, start)]; returns those still alive after timeout."""
    return launch.wait_gone(procs, timeout, POLL)


def kill_all(procs, sig=signal.SIGKILL) -> None:
    launch.signal_all(procs, sig)


def shared_file(rel: str, what: str) -> str:
    """The path of a file of the shared directory; skips the test, saying
    which file and what it is, when it is not there."""
    path = os.path.join(SHARED, rel)
    if not os.path.exists(path):
        pytest.skip(f"needs {path} ({what}), which is missing: the shared directory is "
                    f"expected beside the repository; set FLUD_SHARED to where it is")
    return path


# ---- commands -----------------------------------------------------------------

def flud(*args, timeout=COMMAND_TIMEOUT, env=None, input=None):
    """Run `python -m flud ARGS`; returns the CompletedProcess (text)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.pop("FLUD_PASSPHRASE", None)
    full_env.update(env or {})
    return subprocess.run([PYTHON, "-m", "flud", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=ROOT,
                          stdin=subprocess.DEVNULL if input is None else None, input=input)


def flud_popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None):
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    return subprocess.Popen([PYTHON, "-m", "flud", *map(str, args)], stdout=stdout,
                            stderr=stderr, stdin=subprocess.DEVNULL, text=True,
                            env=full_env, cwd=ROOT, start_new_session=True)


def tool(*args, timeout=60.0):
    """Run peer_tool.py; returns the JSON of its last output line."""
    proc = subprocess.run([PYTHON, PEER_TOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"peer_tool {' '.join(map(str, args))} failed "
                             f"(exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1])


def tool_popen(*args):
    return subprocess.Popen([PYTHON, PEER_TOOL, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            cwd=ROOT, start_new_session=True)


def output(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


# ---- one foreground node --------------------------------------------------------

class NodeProcess:
    """`flud node run` in its own session; ready once node.json names its pid."""

    def __init__(self, home, port=0, join=None, extra=()):
        self.home = os.path.abspath(home)
        os.makedirs(self.home, exist_ok=True)
        args = ["node", "run", "--home", self.home, "--port", port]
        if join:
            args += ["--join", join]
        # `python -m flud node run`, not the lean interpreter straight away:
        # the node replacing itself by one is part of what is tested.
        self.popen = launch.spawn_exec([*map(str, args), *extra],
                                       os.path.join(self.home, "stderr.log"),
                                       lean=False, cwd=ROOT)
        self.pid = self.popen.pid
        self.start = None
        self.info = None

    def wait_ready(self, timeout=READY_TIMEOUT) -> dict:
        def ready():
            if self.popen.poll() is not None:
                pytest.fail(f"node in {self.home} exited with {self.popen.returncode}:\n"
                            + self.log_tail())
            return launch.ready_info(self.home, self.pid)

        self.info = wait_until(ready, timeout, f"node {self.home} to be ready")
        self.start = procfs.start_ticks(self.pid)
        return self.info

    @property
    def port(self) -> int:
        return self.info["port"]

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, name="stderr.log", lines=20) -> str:
        return launch.log_tail(self.home, name, lines)

    def send(self, sig) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Signal, wait (bounded), SIGKILL if needed; returns the exit code."""
        return launch.stop_process(self.popen, sig, timeout, kill_timeout=STOP_TIMEOUT)

    def alive(self) -> bool:
        return self.popen.poll() is None


# ---- testnets -----------------------------------------------------------------

class Testnet:
    __test__ = False  # not a test class, whatever its name

    def __init__(self, directory):
        self.dir = os.path.abspath(str(directory))
        self.restarted = {}    # index -> NodeProcess that replaced a stopped node
        self.started = []      # every NodeProcess this object started

    # the nodes as testnet.json recorded them, with restarted ones replaced
    @property
    def nodes(self) -> list:
        nodes = launch.load(self.dir)["nodes"]
        for index, node in self.restarted.items():
            nodes[index] = dict(nodes[index], pid=node.pid, start=node.start)
        return nodes

    def addr(self, index: int) -> str:
        node = self.nodes[index]
        return f"{node['host']}:{node['port']}"

    def up(self, nodes: int, *extra, timeout=90.0):
        proc = flud("testnet", "up", "--nodes", nodes, "--dir", self.dir, *extra, timeout=timeout)
        return proc

    def stats(self) -> list:
        """[{"node_id", "pid", "stats"}] for every node (stats None when down)."""
        return tool("stats", self.dir)

    def node_alive(self, index: int) -> bool:
        node = self.nodes[index]
        return is_alive(node["pid"], node.get("start"))

    def stop(self, index: int, sig=signal.SIGTERM, wait=True) -> None:
        node = self.nodes[index]
        if index in self.restarted:
            self.restarted[index].stop(sig)
            return
        if is_alive(node["pid"], node.get("start")):
            os.kill(node["pid"], sig)
        if wait:
            left = wait_gone([(node["pid"], node.get("start"))])
            assert not left, f"node {index} (pid {node['pid']}) did not stop after {sig!r}"

    def restart(self, index: int, join=True) -> NodeProcess:
        """Bring a stopped node back: same home and port, so the same identity.
        It joins through the first other node that runs (as a restarted node
        of a real network would), so the others see it alive again."""
        node = self.nodes[index]
        assert not self.node_alive(index), f"node {index} is still running"
        via = None
        if join:
            via = next((self.addr(i) for i in range(len(self.nodes))
                        if i != index and self.node_alive(i)), None)
        proc = NodeProcess(node["home"], port=node["port"], join=via)
        self.started.append(proc)
        proc.wait_ready()
        self.restarted[index] = proc
        return proc

    def index_of(self, node_id_hex: str) -> int:
        for i, node in enumerate(self.nodes):
            if node["node_id"] == node_id_hex:
                return i
        raise KeyError(node_id_hex)

    def share_path(self, index: int, key_hex: str) -> str:
        return share_path(self.nodes[index]["home"], key_hex)

    def own_processes(self) -> list:
        procs = {(n["pid"], n.get("start")) for n in self.nodes if n.get("pid")}
        procs.update((p.pid, p.start) for p in self.started)
        procs.update(processes_mentioning(self.dir))
        return [(pid, start) for pid, start in procs if is_alive(pid, start)]

    def cleanup(self) -> None:
        """Stop everything this testnet started, whatever state it is in."""
        try:
            flud("testnet", "down", "--dir", self.dir, timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for proc in self.started:
            if proc.alive():
                proc.send(signal.SIGTERM)
        left = wait_gone(self.own_processes(), timeout=10)
        kill_all(left)
        left = wait_gone(left, timeout=10)
        for proc in self.started:
            try:
                proc.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        assert not left, f"could not stop {left}"


def share_path(node_home, key_hex: str) -> str:
    """Where a node keeps a standalone share (the store's own layout)."""
    from flud.storage.layout import Layout
    return Layout(os.path.join(node_home, "store")).share_path(bytes.fromhex(key_hex))


def start_testnet(directory, nodes: int) -> Testnet:
    net = Testnet(directory)
    proc = net.up(nodes)
    if proc.returncode != 0:
        net.cleanup()
        pytest.fail(f"testnet up --nodes {nodes} failed:\n{output(proc)}")
    assert len(net.nodes) == nodes
    return net


# ---- trees ----------------------------------------------------------------------

def compare_trees(a, b) -> list:
    from tools.treecmp import compare_trees as compare
    return compare(str(a), str(b))


def write_random(path, size: int, seed: int, mode=None) -> None:
    import random
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 * 1024 * 1024)
            f.write(rng.randbytes(n))
            left -= n
    if mode is not None:
        os.chmod(path, mode)


def init_client(home, testnet=None, join=None, *extra, env=None):
    args = ["init", "--home", home]
    args += ["--testnet", testnet.dir] if testnet is not None else ["--join", join]
    proc = flud(*args, *extra, env=env)
    assert proc.returncode == 0, output(proc)
    return proc


def manifest_of(home, snapshot=None) -> dict:
    """The snapshot as the nodes hold it, read with the home's key
    (tools/snapshot_json.py), in the version-1 manifest's shape."""
    args = [PYTHON, os.path.join(ROOT, "tools", "snapshot_json.py"), "--home", str(home)]
    if snapshot is not None:
        args += ["--snapshot", str(snapshot)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"snapshot_json failed (exit {proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])
