"""Node processes on 127.0.0.1: start them, know when they are ready, know
whether they still run, stop them. The CLI's testnet commands, the
benchmarks and the integration tests all start and reap nodes with this.

Nothing here runs a reactor (a Twisted reactor cannot be restarted, and
the tests and benchmarks must not run one): asking the nodes over the wire
is flud/testnet/query.py's.

- A node is ready once the node.json in its home names its pid.
- A process is named for good by its pid and its start time (pids get
  reused): testnet.json records both, and nothing here signals a pid whose
  start time no longer matches.
- A testnet directory holds node-00, node-01, ... (the nodes' homes) and
  testnet.json (written once every node is ready). A directory that ran a
  testnet keeps its nodes' homes, so starting it again brings back the same
  nodes with their data.
"""
import json
import os
import signal
import subprocess
import sys
import time

from flud import procfs
from flud.errors import FludError
from flud.lean import node_interpreter_argv
from flud.node.config import NodeConfig

READY_POLL = 0.05
STOP_TIMEOUT = 15.0


class LaunchError(FludError):
    """Node processes did not start, or did not come to know each other."""

    code = "TESTNET_LAUNCH"


# ---- the testnet directory --------------------------------------------------------

def node_home(directory: str, index: int) -> str:
    return os.path.join(directory, f"node-{index:02d}")


def testnet_file(directory: str) -> str:
    return os.path.join(directory, "testnet.json")


def load(directory: str) -> dict:
    try:
        with open(testnet_file(directory)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"nodes": []}


def write(directory: str, nodes: list) -> None:
    path = testnet_file(directory)
    with open(path + ".tmp", "w") as f:
        json.dump({"version": 1, "nodes": nodes}, f, indent=1)
    os.replace(path + ".tmp", path)


def forget(directory: str) -> None:
    """Remove testnet.json (the nodes' homes stay)."""
    try:
        os.unlink(testnet_file(directory))
    except FileNotFoundError:
        pass


# ---- one process ------------------------------------------------------------------

def is_running(pid, start=None) -> bool:
    """That very process exists and is not a zombie (pid, and start time when given)."""
    stat = procfs.process_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return start is None or stat[1] == start


def node_running(node: dict) -> bool:
    """is_running for a node as testnet.json records it."""
    pid = node.get("pid")
    return pid is not None and is_running(pid, node.get("start"))


def ready_info(home: str, pid: int):
    """The node.json of a node that is ready, if it is that process's."""
    try:
        with open(os.path.join(home, "node.json")) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    return info if info.get("pid") == pid else None


def log_tail(home: str, name: str = "stderr.log", lines: int = 8) -> str:
    try:
        with open(os.path.join(home, name), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class ForkedNode:
    """A node forked from this process, with Popen's poll and a wait that
    gives up after timeout (without raising)."""

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


def node_run_args(config: NodeConfig) -> list:
    """`flud` arguments that run config's node."""
    args = ["node", "run", "--home", config.home, "--port", str(config.port),
            "--capacity", str(config.capacity)]
    if config.host != NodeConfig.host:
        args += ["--host", config.host]
    for address in ((config.join,) if config.join else ()) + tuple(config.also_join):
        args += ["--join", f"{address[0]}:{address[1]}"]
    if config.memory_log:
        args += ["--memory-log", config.memory_log]
    if config.memory_budget is not None:
        args += ["--memory-budget", str(config.memory_budget)]
    if config.verbose:
        args.append("--verbose")
    if not config.relay:
        args.append("--no-relay")
    for flag, value, default in (("--lease", config.lease_seconds, NodeConfig.lease_seconds),
                                 ("--trash-time", config.trash_seconds, NodeConfig.trash_seconds),
                                 ("--lease-sweep-interval", config.lease_sweep_interval,
                                  NodeConfig.lease_sweep_interval)):
        if value != default:
            args += [flag, repr(float(value))]
    # `flud node run` has a finite grant by default; a NodeConfig's None is none.
    args += ["--grant", "unlimited" if config.grant is None else str(config.grant)]
    if config.give_ratio != NodeConfig.give_ratio:
        args += ["--give-ratio", repr(config.give_ratio)]
    for owner, size in config.owner_quotas:
        args += ["--owner-quota", f"{owner.hex()}={size}"]
    if config.claim_allowance != NodeConfig.claim_allowance:
        args += ["--claim-allowance", str(config.claim_allowance)]
    if config.ledger_interval != NodeConfig.ledger_interval:
        args += ["--ledger-interval", repr(float(config.ledger_interval))]
    return args


def spawn_exec(flud_args: list, stderr_path: str, lean: bool = True, cwd=None):
    """`flud FLUD_ARGS` in a fresh interpreter and its own session; returns
    its Popen. lean: start it as the lean node interpreter (flud/lean.py)
    rather than let `flud node run` replace itself by one."""
    argv = (node_interpreter_argv(flud_args) if lean
            else [sys.executable, "-m", "flud", *flud_args])
    with open(stderr_path, "ab") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, cwd=cwd, start_new_session=True, close_fds=True)


def spawn_node(config: NodeConfig, fork: bool = True, ready=None, close=()):
    """Start config's node (its home made, any old node.json removed), its
    stderr in stderr.log there; returns a Popen or a ForkedNode.

    fork: fork this process (call preload() once first). Forking one
    pre-imported launcher costs milliseconds per node where a fresh
    interpreter costs ~0.3 s of CPU: the difference between a 50-node start
    in a few seconds and in fifteen on two cores."""
    os.makedirs(config.home, exist_ok=True)
    try:
        os.unlink(os.path.join(config.home, "node.json"))
    except FileNotFoundError:
        pass
    stderr_path = os.path.join(config.home, "stderr.log")
    if fork:
        from flud.node.process import run_forked  # see Testnet.start
        sys.stdout.flush()
        sys.stderr.flush()
        return ForkedNode(run_forked(config, stderr_path, ready, close))
    return spawn_exec(node_run_args(config), stderr_path)


def stop_process(proc, sig=signal.SIGTERM, timeout=STOP_TIMEOUT, kill_timeout=STOP_TIMEOUT):
    """Signal a Popen we started, wait for it (which reaps it), SIGKILL it if
    it outlives timeout; returns its exit code."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=kill_timeout)


# ---- many processes, by pid -------------------------------------------------------

def signal_all(procs, sig=signal.SIGKILL) -> list:
    """procs: [(pid, start)]; signals those still running, returns them."""
    hit = []
    for pid, start in procs:
        if is_running(pid, start):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            hit.append((pid, start))
    return hit


def wait_gone(procs, timeout=STOP_TIMEOUT, poll=READY_POLL) -> list:
    """procs: [(pid, start)]; returns those still running after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [(p, s) for p, s in procs if is_running(p, s)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(poll)


def stop_nodes(nodes: list, timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM every node of the list still running, SIGKILL those that
    outlive timeout; returns how many were running."""
    running = [n for n in nodes if node_running(n)]
    for node in running:
        try:
            os.kill(node["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(node_running(n) for n in running):
        time.sleep(READY_POLL)
    for node in running:
        if node_running(node):
            os.kill(node["pid"], signal.SIGKILL)
    return len(running)


# ---- a testnet --------------------------------------------------------------------

class Testnet:
    """The nodes of one testnet directory: start them all, stop them."""

    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        self.processes = {}  # index -> Popen or ForkedNode started by start()

    @property
    def nodes(self) -> list:
        """The nodes as testnet.json records them."""
        return load(self.directory)["nodes"]

    def alive(self) -> list:
        return [n for n in self.nodes if node_running(n)]

    def start(self, count: int, capacity: int, memory_log: bool = False, base_port: int = 0,
              fork: bool = True, deadline: float = None, options: dict | None = None) -> list:
        """Start the first node, then the others joining through it; wait
        until every one is ready (LaunchError past deadline, a monotonic
        time); write testnet.json; return its nodes. On failure, abort()
        stops what was started. (`flud testnet up` forks its nodes with
        flud/testnet/crowd.py instead: they say when they joined.)"""
        os.makedirs(self.directory, exist_ok=True)
        if fork:
            # The node's code, loaded only to fork nodes: the benchmarks and
            # the tests use this module in processes that must stay small.
            from flud.node.process import preload
            preload()

        def config(index, join):
            return self.node_config(index, join, (), capacity, memory_log, base_port, options)

        self.processes[0] = spawn_node(config(0, None), fork)
        first = self._wait_ready({0: self.processes[0]}, deadline)[0]
        join = ("127.0.0.1", first["port"])
        for i in range(1, count):
            self.processes[i] = spawn_node(config(i, join), fork)
        infos = self._wait_ready(self.processes, deadline)
        nodes = [infos[i] for i in range(count)]
        write(self.directory, nodes)
        return nodes

    def node_config(self, index: int, join, also_join, capacity: int, memory_log: bool = False,
                    base_port: int = 0, options: dict | None = None) -> NodeConfig:
        home = node_home(self.directory, index)
        return NodeConfig(home=home, port=base_port + index if base_port else 0,
                          join=join, also_join=tuple(also_join), capacity=capacity,
                          memory_log=os.path.join(home, "memory.csv") if memory_log else None,
                          **(options or {}))

    def _wait_ready(self, procs: dict, deadline: float) -> dict:
        """procs: index -> process. Returns index -> node.json contents."""
        ready = {}
        while len(ready) < len(procs):
            for index, proc in procs.items():
                if index in ready:
                    continue
                home = node_home(self.directory, index)
                info = ready_info(home, proc.pid)
                if info is not None:
                    ready[index] = info
                    continue
                if proc.poll() is not None:
                    raise LaunchError(f"node {index} exited with code {proc.returncode} "
                                      f"before it was ready:\n{log_tail(home)}")
            if time.monotonic() > deadline:
                missing = sorted(set(procs) - set(ready))
                raise LaunchError(f"{len(missing)} node(s) did not come up in time: "
                                  f"{missing[:10]}")
            time.sleep(READY_POLL)
        return ready

    def abort(self) -> None:
        """Stop every process start() started, reap them, forget testnet.json."""
        stop_nodes([{"pid": p.pid} for p in self.processes.values()])
        for proc in self.processes.values():
            proc.wait(timeout=5)
        forget(self.directory)

    def stop(self) -> int:
        """Stop the recorded nodes; returns how many were running."""
        return stop_nodes(self.nodes)
