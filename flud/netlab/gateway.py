"""Lab routers that map ports on request: miniupnpd in the router's
namespace, as on a home router (docs/network-lab.md, "Port-mapping routers").

- upnp:   UPnP-IGD and NAT-PMP/PCP both on (many home routers; a node
          maps with whichever it finds first, flud/node/port_mapping.py);
- natpmp: NAT-PMP/PCP only (a node's UPnP discovery finds nothing);
- igd:    UPnP-IGD only (its NAT-PMP port is closed).

Their ruleset and miniupnpd's configuration: flud/netlab/miniupnpd.py.
Each router's processes (the STUN responder, miniupnpd) are started with
their files in the lab's directory (D/gateways/NS/) and recorded in
lab.json's "daemons" (pid and start time), so that `down` stops exactly
those, before the namespaces go.
"""
import os
import shutil
import subprocess
import sys
import time

from flud import procfs
from flud.netlab.build import LabError, enter_namespace
from flud.netlab.miniupnpd import (HTTP_PORT, KINDS, NATPMP_PORT, SPEAKS_NATPMP, SPEAKS_UPNP,
                                   STUN_PORT, miniupnpd_config)
from flud.testnet import launch

MINIUPNPD = "/usr/sbin/miniupnpd"
READY_TIMEOUT = 20.0


def miniupnpd_path():
    return shutil.which("miniupnpd") or (MINIUPNPD if os.path.exists(MINIUPNPD) else None)


def missing_miniupnpd():
    """Why a mapping router cannot run here (a sentence), or None."""
    path = miniupnpd_path()
    if path is None:
        return ("a port-mapping router needs miniupnpd (Debian package miniupnpd-nftables, "
                "or miniupnpd)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"miniupnpd does not run: {err}"
    if "nftables" not in version:
        return (f"this miniupnpd is not built for nftables ({version.strip()!r}): the lab's "
                f"routers are nftables; install miniupnpd-nftables")
    return None


def _listening(pid: int, port: int, protocol: str) -> bool:
    """Has process pid's namespace a socket bound to port (/proc/PID/net)?"""
    try:
        with open(f"/proc/{pid}/net/{protocol}") as f:
            lines = f.readlines()[1:]
    except OSError:
        return False
    for line in lines:
        local = line.split()[1]
        if int(local.rsplit(":", 1)[1], 16) == port:
            return True
    return False


def _spawn(namespace: str, argv: list, log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True,
                                preexec_fn=lambda: enter_namespace(namespace))


def start(routers: list, directory: str, record) -> None:
    """Start a STUN responder and miniupnpd in each mapping router;
    record(daemon dict) each as soon as it runs; wait until every miniupnpd
    listens. LabError (with its log's tail) if one exits or is not ready."""
    routers = [r for r in routers if r.kind in KINDS]
    if not routers:
        return
    why = missing_miniupnpd()
    if why:
        raise LabError(why)
    started = []
    for router in routers:
        files = os.path.join(directory, "gateways", router.namespace)
        shutil.rmtree(files, ignore_errors=True)   # a lease file of an earlier lab maps at start
        os.makedirs(files)
        wan = router.wan_address.split("/")[0]
        stun = _spawn(router.namespace, [sys.executable, "-m", "flud.netlab.stun", wan,
                                         str(STUN_PORT)], os.path.join(files, "stun.log"))
        record(_daemon("stun", router.namespace, stun) | {"kind": router.kind, "wan": wan})
        config = os.path.join(files, "miniupnpd.conf")
        with open(config, "w") as f:
            f.write(miniupnpd_config(router, files))
        started.append((router, files, config, stun))
    deadline = time.monotonic() + READY_TIMEOUT
    for router, files, config, stun in started:
        # the responder must answer before miniupnpd asks (it exits otherwise)
        _wait(lambda: _listening(stun.pid, STUN_PORT, "udp"), stun, "the STUN responder",
              os.path.join(files, "stun.log"), deadline)
        daemon = _spawn(router.namespace, [miniupnpd_path(), "-d", "-f", config, "-P",
                                           os.path.join(files, "miniupnpd.pid")],
                        os.path.join(files, "miniupnpd.log"))
        record(_daemon("miniupnpd", router.namespace, daemon))
        ports = ([(NATPMP_PORT, "udp")] if router.kind in SPEAKS_NATPMP else []) + (
            [(HTTP_PORT, "tcp")] if router.kind in SPEAKS_UPNP else [])
        _wait(lambda: all(_listening(daemon.pid, p, proto) for p, proto in ports), daemon,
              f"miniupnpd in {router.namespace}", os.path.join(files, "miniupnpd.log"), deadline)


def _daemon(name: str, namespace: str, proc: subprocess.Popen) -> dict:
    return {"name": name, "namespace": namespace, "pid": proc.pid,
            "start": procfs.start_ticks(proc.pid)}


def _wait(ready, proc, what: str, log_path: str, deadline: float) -> None:
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(log_path, errors="replace") as f:
                tail = f.read()[-800:]
            state = (f"exited with code {proc.returncode}" if proc.returncode is not None
                     else f"not ready in {READY_TIMEOUT:g} s")
            raise LabError(f"{what} {state}:\n{tail}")
        time.sleep(0.05)


def stop(daemons: list) -> int:
    """Stop the recorded daemons still running (by pid and start time);
    returns how many were. Those this process started are reaped."""
    stopped = launch.stop_nodes([d for d in daemons if d.get("start") is not None])
    for daemon in daemons:
        try:
            os.waitpid(daemon["pid"], os.WNOHANG)
        except ChildProcessError:
            pass          # another process's child (`flud lab up` started it)
    return stopped
