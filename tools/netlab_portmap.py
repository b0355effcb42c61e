"""The network lab's port-mapping figures (tools/netlab_run.py's last section).

A small lab of its own (its own prefix, taken down at the end): public
hosts and one site behind each kind of mapping router (miniupnpd:
UPnP-IGD and NAT-PMP, NAT-PMP only, UPnP-IGD only; flud/netlab/gateway.py).
For each NATed node: which way it mapped its port and how long that took
(from its start), whether and how soon after the nodes were ready a public
host reaches it directly at its router's address (TLS and HELLO expecting
its id: no relay in the way), and when its record published that address
(confirmed by public peers' dial-backs).

    python tools/netlab_portmap.py [--dir run/netlab-portmap]
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flud.netlab import build, gateway  # noqa: E402
from flud.netlab.lab import Lab  # noqa: E402
from flud.netlab.topology import NODE_PORT, parse_nat  # noqa: E402

SITES = "upnp:1,natpmp:1,igd:1"
WHAT = {"upnp": "UPnP-IGD + NAT-PMP", "natpmp": "NAT-PMP only", "igd": "UPnP-IGD only"}
POLL = 0.5


def _direct(namespace: str, home: str, targets: list) -> dict:
    """{name: STATS or None} of targets asked directly from namespace."""
    proc = subprocess.Popen([sys.executable, "-m", "flud.netlab.probe", home,
                             json.dumps(targets)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: build.enter_namespace(namespace))
    out, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise build.LabError(f"the direct probe failed: {err[-300:]}")
    return json.loads(out)


def measure(directory: str, public: int = 3, sites: str = SITES, timeout: float = 60.0):
    """(figures {label: text}, failures [text]); the lab is down at the end."""
    why = build.missing_prerequisites() or gateway.missing_miniupnpd()
    if why:
        return {"port mapping": f"not measured: {why}"}, []
    figures, failures = {}, []
    Lab(directory).down()          # an earlier run's, if it was killed
    lab = Lab(directory)
    try:
        lab.up(public, parse_nat(sites), deadline=time.monotonic() + timeout,
               progress=lambda text: None)
        ready = time.monotonic()
        state = lab.state
        wan = {d["namespace"]: d["wan"] for d in state["daemons"] if d["name"] == "stun"}
        routers = {h["name"]: h["router"] for h in state["hosts"]}
        mapping = [n for n in state["nodes"] if n["kind"] in gateway.KINDS]
        asker = next(n for n in state["nodes"] if n["kind"] == "public")["namespace"]
        targets = {n["name"]: {"name": n["name"], "node_id": n["node_id"],
                               "host": wan[routers[n["name"]]], "port": NODE_PORT,
                               "pid": n["pid"], "start": n["start"]} for n in mapping}
        reached, published, stats = {}, {}, {}
        while (len(reached) < len(targets) or len(published) < len(targets)) \
                and time.monotonic() - ready < timeout:
            asked = [t for name, t in targets.items() if name not in reached]
            if asked:
                home = os.path.join(directory, ".probe")
                for name, found in _direct(asker, home, asked).items():
                    if found and found.get("node_id") == targets[name]["node_id"]:
                        reached[name] = time.monotonic() - ready
            stats = {n["name"]: s for n, s in lab.stats() if n["kind"] in gateway.KINDS}
            for name, target in targets.items():
                hint = f"tcp:{target['host']}:{NODE_PORT}"
                if name not in published and hint in (
                        ((stats.get(name) or {}).get("reachability") or {}).get("published")
                        or ()):
                    published[name] = time.monotonic() - ready
            time.sleep(POLL)
        for node in mapping:
            name, summary = node["name"], (stats.get(node["name"]) or {})
            mapped = summary.get("port_mapping") or {}
            label = f"{name} behind {node['kind']} ({WHAT[node['kind']]})"
            if mapped.get("mapped"):
                how = (f"mapped by {mapped['method']} in {mapped['mapped_after']:.2f} s "
                       f"at {mapped['mapped']}")
            else:
                how = f"not mapped ({mapped.get('last_error') or 'no answer'})"
                failures.append(f"{name} behind {node['kind']}: {how}")
            if name in reached:
                direct = "reached directly: yes"   # (when: as coarse as a SYN's resend)
            else:
                direct = f"reached directly: no (within {timeout:g} s)"
                failures.append(f"{name} behind {node['kind']} not reached directly")
            if name in published:
                direct += (f"; dialled back and published {published[name]:.1f} s "
                           f"after the nodes were ready")
            else:
                failures.append(f"{name} behind {node['kind']}: its mapped address was not "
                                f"confirmed by dial-backs and published")
            figures[label] = f"{how}; {direct}"
    finally:
        lab.down()
    return figures, failures


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=os.path.join(os.getcwd(), "run", "netlab-portmap"))
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    os.environ.setdefault("FLUD_PASSPHRASE", "netlab passphrase, not a secret")
    found, failed = measure(os.path.abspath(args.dir), timeout=args.timeout)
    print("port mapping (miniupnpd routers):")
    for label, value in found.items():
        print(f"  {label:48} {value}")
    for failure in failed:
        print(f"  FAILED: {failure}")
    raise SystemExit(1 if failed else 0)
