"""A Topology made real with `ip`, `nft` and `tc`, and unmade.

The commands are made by pure functions (root_batch, namespace_batches,
router_setup, delay_batch: tested without root) and run by run_batches.
Under load every process start costs a scheduler's worth of latency (0.2 s
each measured on this machine at load 60), so commands go in batches: one
`ip -batch` in the root namespace makes every namespace and link, then one
`ip -n NS -batch` per namespace (run in parallel) configures each, one shell
per router sets forwarding and its nftables table, and one `tc -batch` in
the core puts the netem delays on the switch's ports.
"""
import ctypes
import os
import shutil
import subprocess

from flud.errors import FludError
from flud.netlab.nat import ruleset
from flud.netlab.topology import Topology

COMMAND_TIMEOUT = 60.0
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"


class LabError(FludError):
    """The lab could not be built, run or taken down."""

    code = "LAB_FAILED"


def missing_prerequisites():
    """Why the lab cannot run here (a sentence), or None."""
    if os.geteuid() != 0:
        return "the network lab needs root (network namespaces, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"the network lab needs `{tool}` (Debian package {package})"
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


# ---- the commands (pure) -------------------------------------------------------

def root_batch(topo: Topology, bridged: bool = True) -> str:
    """Every namespace, then every veth pair with its ends in place (but the
    links onto the switch when not `bridged`: flud/netlab/delay.py makes them)."""
    lines = [f"netns add {ns}" for ns in topo.namespaces()]
    for link in topo.links:
        if link.bridge and not bridged:
            continue
        mac = f" address {link.a_mac}" if link.a_mac else ""
        lines.append(f"link add {link.a_if} netns {link.a_ns}{mac} type veth "
                     f"peer name {link.b_if} netns {link.b_ns}")
    return "\n".join(lines) + "\n"


def namespace_batches(topo: Topology) -> dict:
    """namespace -> `ip -batch` text that brings its links up, plugs the
    switch's ports in, gives addresses and default routes."""
    batches = {ns: ["link set lo up"] for ns in topo.namespaces()}
    batches[topo.core] += ["link add sw type bridge", "link set sw up"]
    for link in topo.links:
        batches[link.a_ns].append(f"link set {link.a_if} up")
        if link.bridge:
            batches[link.b_ns].append(f"link set {link.b_if} master {link.bridge}")
        batches[link.b_ns].append(f"link set {link.b_if} up")
    for address in topo.addresses:
        # nodad: an IPv6 address is usable at once (no 1-2 s of
        # duplicate detection on a link the lab alone made)
        nodad = " nodad" if ":" in address.address else ""
        batches[address.namespace].append(
            f"address add {address.address} dev {address.interface}{nodad}")
    for route in topo.routes:
        batches[route.namespace].append(f"route add default via {route.via}")
    # Every member of the switch knows every other's MAC for good. The
    # kernel's neighbour table is one for all namespaces (gc_thresh3 = 1024
    # entries by default, machine-wide): 50 hosts learning each other by ARP
    # overflow it ("neighbor table overflow", connections failing with "no
    # route to host"). Permanent entries are not counted against it.
    members = topo.switch_members()
    for ns, interface, _, _ in members:
        for other_ns, _, mac, addresses in members:
            if other_ns == ns or not mac:
                continue
            for address in addresses:
                batches[ns].append(f"neigh replace {address} lladdr {mac} dev {interface} "
                                   f"nud permanent")
    return {ns: "\n".join(lines) + "\n" for ns, lines in batches.items()}


def router_setup(topo: Topology) -> dict:
    """router namespace -> (shell command, nft ruleset on its stdin)."""
    return {router.namespace: ("sysctl -qw net.ipv4.ip_forward=1 && nft -f -", ruleset(router))
            for router in topo.routers}


def delay_batch(topo: Topology) -> str:
    """`tc -batch` text for the core: each switch port delays what it sends
    towards its host by half the RTT, so any two hosts see delay_ms * 2."""
    if not topo.delay_ms:
        return ""
    ports = [link.b_if for link in topo.links if link.bridge]
    return "".join(f"qdisc add dev {port} root netem delay {topo.delay_ms:g}ms limit 10000\n"
                   for port in ports)


# ---- running them --------------------------------------------------------------

def _run(argv, stdin_text="", what=""):
    try:
        done = subprocess.run(argv, input=stdin_text, text=True, capture_output=True,
                              timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise LabError(f"{what or argv[0]}: no answer in {COMMAND_TIMEOUT:g} s") from None
    if done.returncode != 0:
        raise LabError(f"{what or ' '.join(argv[:4])} failed: {done.stderr.strip()[:500]}")
    return done.stdout


def _run_parallel(jobs) -> None:
    """jobs: [(argv, stdin text, what)]: all started at once, all waited for;
    LabError naming the first that failed."""
    procs = []
    try:
        for argv, text, what in jobs:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            procs.append((proc, text, what))
        failures = []
        for proc, text, what in procs:
            _, err = proc.communicate(text, timeout=COMMAND_TIMEOUT)
            if proc.returncode != 0:
                failures.append(f"{what}: {err.strip()[:300]}")
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if failures:
        raise LabError(f"{len(failures)} step(s) failed; first: {failures[0]}")


def existing_namespaces() -> set:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def netem_works(namespace: str) -> bool:
    """Can tc put a netem qdisc in namespace (on its loopback, removed again)?"""
    tc = _tool("tc")
    done = subprocess.run([tc, "-n", namespace, "qdisc", "add", "dev", "lo", "root", "netem",
                           "delay", "1ms"], capture_output=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        return False
    subprocess.run([tc, "-n", namespace, "qdisc", "del", "dev", "lo", "root"],
                   capture_output=True, timeout=COMMAND_TIMEOUT)
    return True


def build(topo: Topology, on_forwarder=None) -> str:
    """Make the topology's namespaces, links, addresses, routers and delays.
    The caller records topo.namespaces() first: a failure part-way leaves
    only namespaces that teardown() removes. Returns how the delay is made:
    "" (none), "netem", or "userspace" (no netem here: the links onto the
    switch are flud/netlab/delay.py's TAP devices; on_forwarder(Popen) is
    told of its process as soon as it runs, for the caller to record)."""
    clash = existing_namespaces() & set(topo.namespaces())
    if clash:
        raise LabError(f"namespace(s) {sorted(clash)[:3]} exist already: another lab with "
                       f"prefix {topo.prefix!r} runs; take it down or pick another --prefix")
    ip = _tool("ip")
    _run([ip, "netns", "add", topo.core], "", "making the core namespace")
    delay_by = "" if not topo.delay_ms else "netem" if netem_works(topo.core) else "userspace"
    batch = root_batch(topo, bridged=delay_by != "userspace").split("\n", 1)[1]
    _run([ip, "-batch", "-"], batch, "making namespaces and links")
    if delay_by == "userspace":
        _start_forwarder(topo, on_forwarder)
    batches = namespace_batches(topo)
    _run([ip, "-n", topo.core, "-batch", "-"], batches.pop(topo.core), "the switch")
    _run_parallel([([ip, "-n", ns, "-batch", "-"], text, f"configuring {ns}")
                   for ns, text in batches.items()])
    _run_parallel([([ip, "netns", "exec", ns, "sh", "-c", command], rules, f"router {ns}")
                   for ns, (command, rules) in router_setup(topo).items()])
    delays = delay_batch(topo) if delay_by == "netem" else ""
    if delays:
        _run([_tool("tc"), "-n", topo.core, "-batch", "-"], delays, "netem delays")
    return delay_by


FORWARDER_READY_TIMEOUT = 30.0


def _start_forwarder(topo: Topology, on_forwarder) -> None:
    import json
    import sys
    links = [[link.a_ns, link.a_if, link.b_ns, link.b_if, link.a_mac]
             for link in topo.links if link.bridge]
    proc = subprocess.Popen([sys.executable, "-m", "flud.netlab.delay",
                             json.dumps({"delay_ms": topo.delay_ms, "links": links})],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if on_forwarder is not None:
        on_forwarder(proc)
    import select
    ready, _, _ = select.select([proc.stdout], [], [], FORWARDER_READY_TIMEOUT)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise LabError(f"the delaying forwarder did not start: {err.strip()[-500:]}")


def teardown(namespaces) -> int:
    """Delete those of `namespaces` that exist (their links, routes and
    nftables tables go with them); returns how many were deleted."""
    present = [ns for ns in namespaces if ns in existing_namespaces()]
    if present:
        _run([_tool("ip"), "-force", "-batch", "-"],
             "".join(f"netns del {ns}\n" for ns in present), "deleting namespaces")
    left = existing_namespaces() & set(present)
    if left:
        raise LabError(f"namespace(s) {sorted(left)[:3]} are still there after deletion")
    return len(present)


# ---- entering a namespace ------------------------------------------------------

_libc = None


def enter_namespace(namespace: str) -> None:
    """Move the calling thread into the named network namespace (setns(2));
    sockets made afterwards live there. For a forked child or a preexec_fn."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)
