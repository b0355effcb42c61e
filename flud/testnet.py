"""`flud testnet up|status|down`: N node processes on 127.0.0.1.

`up` starts the first node, then all the others joining through it, waits for
every node's readiness file (node.json), then asks each node over the wire
until every one knows every other. Any failure stops everything it started.
A directory that already ran a testnet keeps its nodes' homes, so `up` after
`down` brings back the same nodes with their data.
"""
import json
import os
import signal
import subprocess
import sys
import time

READY_POLL = 0.05
STOP_TIMEOUT = 15.0


class LaunchError(Exception):
    pass


def node_home(directory: str, index: int) -> str:
    return os.path.join(directory, f"node-{index:02d}")


def _testnet_file(directory: str) -> str:
    return os.path.join(directory, "testnet.json")


def load(directory: str) -> dict:
    try:
        with open(_testnet_file(directory)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"nodes": []}


def is_running(node: dict) -> bool:
    """True if that very process is alive (pid and start time both match)."""
    try:
        with open(f"/proc/{node['pid']}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, KeyError):
        return False
    if fields[0] == "Z":
        return False
    start = node.get("start")
    return start is None or int(fields[19]) == start


class _Forked:
    """A node forked from this launcher (the modules are already imported)."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = time.monotonic() + (timeout or 0)
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(READY_POLL)


def _spawn(directory: str, index: int, port: int, capacity: str, join, memory_log: bool,
           fork: bool = True):
    home = node_home(directory, index)
    os.makedirs(home, exist_ok=True)
    try:
        os.unlink(os.path.join(home, "node.json"))
    except FileNotFoundError:
        pass
    argv = ["node", "run", "--home", home, "--port", str(port), "--capacity", capacity]
    if join:
        argv += ["--join", join]
    if memory_log:
        argv += ["--memory-log", os.path.join(home, "memory.csv")]
    stderr_path = os.path.join(home, "stderr.log")
    if fork:
        # Forking one pre-imported launcher costs milliseconds per node where a
        # fresh interpreter costs ~0.3 s of CPU: the difference between a 50-node
        # start in a few seconds and in fifteen on two cores.
        from flud.cli import build_parser
        from flud.node.run import run_forked
        sys.stdout.flush()
        sys.stderr.flush()
        return _Forked(run_forked(build_parser().parse_args(argv), stderr_path))
    with open(stderr_path, "ab") as err:
        from flud.lean import node_interpreter_argv
        return subprocess.Popen(node_interpreter_argv(argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True, close_fds=True)


def _wait_ready(directory: str, procs: dict, deadline: float) -> dict:
    """procs: index -> Popen. Returns index -> node.json contents."""
    ready = {}
    while len(ready) < len(procs):
        for index, proc in procs.items():
            if index in ready:
                continue
            path = os.path.join(node_home(directory, index), "node.json")
            if os.path.exists(path):
                with open(path) as f:
                    info = json.load(f)
                if info.get("pid") == proc.pid:
                    ready[index] = info
                    continue
            if proc.poll() is not None:
                raise LaunchError(f"node {index} exited with code {proc.returncode} before "
                                  f"it was ready:\n{_tail(node_home(directory, index))}")
        if time.monotonic() > deadline:
            missing = sorted(set(procs) - set(ready))
            raise LaunchError(f"{len(missing)} node(s) did not come up in time: {missing[:10]}")
        time.sleep(READY_POLL)
    return ready


def _tail(home: str, lines: int = 8) -> str:
    try:
        with open(os.path.join(home, "stderr.log"), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _stop_pids(nodes: list) -> int:
    running = [n for n in nodes if is_running(n)]
    for node in running:
        try:
            os.kill(node["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and any(is_running(n) for n in running):
        time.sleep(READY_POLL)
    for node in running:
        if is_running(node):
            os.kill(node["pid"], signal.SIGKILL)
    return len(running)


def up(args) -> int:
    directory = os.path.abspath(args.dir)
    alive = [n for n in load(directory)["nodes"] if is_running(n)]
    if alive:
        print(f"a testnet is already running in {directory} ({len(alive)} nodes alive); "
              f"use `flud testnet status --dir {args.dir}` or `flud testnet down --dir {args.dir}`")
        return 1
    if args.nodes < 1:
        print("--nodes must be at least 1")
        return 2
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.timeout
    procs = {}

    def port_for(i):
        return args.base_port + i if args.base_port else 0

    fork = getattr(args, "spawn", "fork") == "fork"
    if fork:
        from flud.node.run import preload
        preload()
    try:
        procs[0] = _spawn(directory, 0, port_for(0), args.capacity, None, args.memory_log, fork)
        first = _wait_ready(directory, {0: procs[0]}, deadline)[0]
        join = f"127.0.0.1:{first['port']}"
        for i in range(1, args.nodes):
            procs[i] = _spawn(directory, i, port_for(i), args.capacity, join, args.memory_log, fork)
        infos = _wait_ready(directory, procs, deadline)
        processes_ready = time.monotonic() - started
        nodes = [infos[i] for i in range(args.nodes)]
        _write(directory, nodes)
        print(f"{args.nodes} node processes ready in {processes_ready:.2f} s; waiting for membership...")
        from flud.testnet_query import wait_converged
        wait_converged(directory, nodes, deadline)
    except (LaunchError, KeyboardInterrupt) as err:
        print(f"testnet did not start: {err}", file=sys.stderr)
        _stop_pids([{"pid": p.pid} for p in procs.values()])
        for p in procs.values():
            p.wait(timeout=5)
        try:
            os.unlink(_testnet_file(directory))
        except FileNotFoundError:
            pass
        return 1
    total = time.monotonic() - started
    print(f"testnet up: {args.nodes} nodes on 127.0.0.1, every node knows every other, "
          f"in {total:.2f} s (processes {processes_ready:.2f} s). Details: {_testnet_file(directory)}")
    return 0


def _write(directory: str, nodes: list) -> None:
    path = _testnet_file(directory)
    with open(path + ".tmp", "w") as f:
        json.dump({"version": 1, "nodes": nodes}, f, indent=1)
    os.replace(path + ".tmp", path)


def down(args) -> int:
    directory = os.path.abspath(args.dir)
    nodes = load(directory)["nodes"]
    if not nodes:
        print(f"no testnet in {directory}")
        return 1
    stopped = _stop_pids(nodes)
    print(f"stopped {stopped} node process(es) of {len(nodes)} in {directory}")
    return 0


def main(args) -> int:
    if args.action == "up":
        return up(args)
    if args.action == "down":
        return down(args)
    from flud.testnet_query import status
    return status(args)
