"""A network lab: its namespaces and routers (flud/netlab/build.py) and a
node in every host namespace, brought up and taken down as one.

The lab directory D holds lab.json and one home per node (D/h000, D/n00,
...). lab.json is written before anything is made and again after each
step, so `down` removes exactly what `up` made even after a crash part-way:
the namespaces it planned (only those that exist) and the node processes it
recorded (by pid and start time, as the testnet does).

Nodes are forked from this process (preloaded once: milliseconds per node
instead of ~0.3 s of CPU for a fresh interpreter) and each child enters its
namespace (setns) before its reactor makes a single socket.
"""
import json
import os
import secrets
import shutil
import subprocess
import sys
import time

from flud import procfs
from flud.netlab import build, gateway
from flud.netlab.topology import NODE_PORT, Topology, build_topology
from flud.node.config import NodeConfig
from flud.testnet import launch

LAB_FILE = "lab.json"
LAB_VERSION = 1
PROBE_TIMEOUT = 60.0


def lab_file(directory: str) -> str:
    return os.path.join(directory, LAB_FILE)


def load(directory: str):
    """lab.json's contents, or None where there is no lab."""
    try:
        with open(lab_file(directory)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save(directory: str, state: dict) -> None:
    path = lab_file(directory)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def new_prefix() -> str:
    """A short name no other lab on this machine uses: 'fl' + 4 hex digits."""
    taken = {ns.split("-")[0] for ns in build.existing_namespaces()}
    while True:
        prefix = "fl" + secrets.token_hex(2)
        if prefix not in taken:
            return prefix


def spawn_in(namespace: str, config: NodeConfig, capture_stderr: str) -> launch.ForkedNode:
    """Fork a node that runs config inside namespace."""
    os.makedirs(config.home, exist_ok=True)
    try:
        os.unlink(os.path.join(config.home, "node.json"))
    except FileNotFoundError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return launch.ForkedNode(pid)
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        err = os.open(capture_stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(err, 2)
        build.enter_namespace(namespace)
        from flud.node.process import run
        code = run(config)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


class Lab:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        self.state = load(self.directory)
        self.processes = {}

    # ---- up ------------------------------------------------------------------

    def up(self, public: int, nat_sites: list, delay_ms: float = 0.0, prefix: str = "",
           capacity: int = 10 * 1024 ** 3, deadline: float = None, progress=print) -> dict:
        """Build the lab and start its nodes; returns lab.json's contents. On
        any failure everything made so far is taken down and the error raised."""
        deadline = deadline or time.monotonic() + 120.0
        if self.state and (self.state.get("namespaces") or self.state.get("nodes")):
            raise build.LabError(f"a lab is recorded in {self.directory} already: "
                                 f"`flud lab down --dir {self.directory}` first")
        os.makedirs(self.directory, exist_ok=True)
        topo = build_topology(prefix or new_prefix(), public, nat_sites, delay_ms)
        self.state = {"version": LAB_VERSION, "prefix": topo.prefix,
                      "namespaces": topo.namespaces(), "delay_ms": delay_ms,
                      "hosts": [vars(h) | {"expected": h.expected_reachability}
                                for h in topo.hosts],
                      "nodes": []}
        save(self.directory, self.state)
        try:
            started = time.monotonic()
            self.state["delay_by"] = build.build(topo, on_forwarder=self._record_forwarder)
            gateway.start(topo.routers, self.directory, self._record_daemon)
            progress(f"{len(topo.namespaces())} namespaces, {len(topo.routers)} NAT routers "
                     f"made in {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            self._start_nodes(topo, capacity, deadline)
            progress(f"{len(topo.hosts)} nodes ready in {time.monotonic() - started:.1f} s")
        except BaseException:
            self.down()
            raise
        return self.state

    def _record_forwarder(self, proc) -> None:
        """The delaying forwarder (flud/netlab/delay.py), stopped by down()."""
        self.processes["forwarder"] = proc
        self.state["forwarder"] = {"pid": proc.pid, "start": procfs.start_ticks(proc.pid)}
        save(self.directory, self.state)

    def _start_nodes(self, topo: Topology, capacity: int, deadline: float) -> None:
        from flud.node.process import preload
        preload()
        first, rest = topo.hosts[0], topo.hosts[1:]
        self._spawn(first, None, capacity)
        self._wait_ready([first], deadline)
        join = (first.address, NODE_PORT)
        for host in rest:
            self._spawn(host, join, capacity)
        self._wait_ready(rest, deadline)

    def _spawn(self, host, join, capacity) -> None:
        home = os.path.join(self.directory, host.name)
        # "::": dual-stack, the record's candidates from the namespace's own addresses
        config = NodeConfig(home=home, host="::", port=NODE_PORT, join=join,
                            capacity=capacity)
        proc = spawn_in(host.namespace, config, os.path.join(home, "stderr.log"))
        self.processes[host.name] = proc
        self.state["nodes"].append({"name": host.name, "namespace": host.namespace,
                                    "pid": proc.pid, "start": procfs.start_ticks(proc.pid),
                                    "home": home,
                                    "kind": host.kind, "expected": host.expected_reachability,
                                    "host": host.address, "port": NODE_PORT})
        save(self.directory, self.state)

    def _record_daemon(self, daemon: dict) -> None:
        self.state.setdefault("daemons", []).append(daemon)
        save(self.directory, self.state)

    def _wait_ready(self, hosts, deadline) -> None:
        waiting = {h.name for h in hosts}
        nodes = {n["name"]: n for n in self.state["nodes"]}
        while waiting:
            for name in sorted(waiting):
                node, proc = nodes[name], self.processes[name]
                info = launch.ready_info(node["home"], proc.pid)
                if info is not None:
                    node["node_id"] = info["node_id"]
                    waiting.discard(name)
                elif proc.poll() is not None:
                    raise build.LabError(f"node {name} exited with code {proc.returncode}:\n"
                                         f"{launch.log_tail(node['home'])}")
            if waiting and time.monotonic() > deadline:
                raise build.LabError(f"{len(waiting)} node(s) not ready in time: "
                                     f"{sorted(waiting)[:5]}")
            time.sleep(launch.READY_POLL)
        save(self.directory, self.state)

    # ---- down ----------------------------------------------------------------

    def down(self) -> tuple:
        """Stop the recorded nodes, delete the recorded namespaces; returns
        (nodes stopped, namespaces deleted)."""
        if not self.state:
            return 0, 0
        gateway.stop(self.state.get("daemons", []))   # miniupnpd outlives its namespace
        nodes = self.state.get("nodes", [])
        stopped = launch.stop_nodes([n for n in nodes if n.get("start") is not None])
        if self.state.get("forwarder"):
            launch.stop_nodes([self.state["forwarder"]], timeout=5)
        for proc in self.processes.values():   # reap our own children
            proc.wait(timeout=5)
        deleted = build.teardown(self.state.get("namespaces", []))
        self.state = {"version": LAB_VERSION, "namespaces": [], "nodes": []}
        os.unlink(lab_file(self.directory))
        return stopped, deleted

    # ---- asking the nodes ----------------------------------------------------

    def stats(self) -> list:
        """[(node, STATS or None)] for every node, asked from inside the lab:
        the public nodes from the first host's namespace, each NATed node
        from its own (its address is private to its home)."""
        nodes = self.state.get("nodes", []) if self.state else []
        groups = {}
        public_ns = next((n["namespace"] for n in nodes if n["kind"] == "public"), None)
        for node in nodes:
            ns = public_ns if node["kind"] == "public" else node["namespace"]
            groups.setdefault(ns, []).append(node)
        probes = {ns: self._probe(ns, members) for ns, members in groups.items()}
        found = {}
        for ns, proc in probes.items():
            try:
                out, err = proc.communicate(timeout=PROBE_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            if proc.returncode != 0:
                raise build.LabError(f"asking the nodes from {ns} failed: {err[-500:]}")
            found.update(json.loads(out))
        return [(n, found.get(n["name"])) for n in nodes]

    def stats_through_relays(self, from_host: str = "") -> dict:
        """{name: STATS or None} of every NATed node, asked from a public
        host's namespace (which cannot reach them directly) through the
        relay each holds a reservation on: proof that relayed connections
        carry TLS and HELLO end to end."""
        rows = self.stats()
        by_id = {n["node_id"]: n for n, _ in rows}
        targets, relays = [], {}
        for node, stats in rows:
            relay = ((stats or {}).get("relay") or {}).get("reserved_on")
            if node["kind"] == "public" or not relay or relay not in by_id:
                continue
            relays[relay] = [by_id[relay]["host"], by_id[relay]["port"]]
            targets.append(dict(node, host="relay:" + relay, port=0))
        public = [n for n, _ in rows if n["kind"] == "public"]
        where = next((n for n in public if n["name"] == from_host), public[0])
        proc = self._probe(where["namespace"], targets, relays)
        out, err = proc.communicate(timeout=PROBE_TIMEOUT)
        if proc.returncode != 0:
            raise build.LabError(f"asking through relays failed: {err[-500:]}")
        found = json.loads(out)
        return {n["name"]: found.get(n["name"]) for n, _ in rows if n["kind"] != "public"}

    def _probe(self, namespace: str, nodes: list, relays=None) -> subprocess.Popen:
        """A probe process inside namespace asking `nodes` (all started at
        once: each costs an interpreter's start)."""
        home = os.path.join(self.directory, ".probe", namespace)
        os.makedirs(home, exist_ok=True)
        argv = [sys.executable, "-m", "flud.netlab.probe", home,
                json.dumps([{k: n[k] for k in ("name", "node_id", "host", "port", "pid", "start")}
                            for n in nodes])]
        if relays:
            argv.append(json.dumps(relays))
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: build.enter_namespace(namespace))

    def exec_argv(self, name: str, argv: list) -> subprocess.Popen:
        """Run argv inside the namespace of host `name` (for `flud lab exec`)."""
        hosts = {h["name"]: h for h in self.state.get("hosts", [])} if self.state else {}
        if name not in hosts:
            raise build.LabError(f"no host {name!r} in this lab (hosts: "
                                 f"{', '.join(sorted(hosts)[:8])}...)")
        namespace = hosts[name]["namespace"]
        if argv[:1] == ["flud"] and shutil.which("flud") is None:
            argv = [sys.executable, "-m", "flud", *argv[1:]]   # this flud, not one on PATH
        return subprocess.Popen(argv, preexec_fn=lambda: build.enter_namespace(namespace))
