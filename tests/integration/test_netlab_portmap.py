"""Port mapping for real: three lab routers run miniupnpd (flud/netlab/gateway.py),
one with UPnP-IGD and NAT-PMP (`upnp`), one with NAT-PMP only (`natpmp`), one
with UPnP-IGD only (`igd`), and the node behind each maps its port, is dialled back there by public peers,
publishes the router's address as a direct tcp: hint, is found by it and
reached directly from a public host; at shutdown it drops its mapping, and
`down` stops miniupnpd and everything else the lab made.

Needs root, `ip`, `nft` and miniupnpd built for nftables (Debian:
miniupnpd-nftables; .ci/run installs it); skipped, saying which, without."""
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

from flud.netlab import build, gateway
from flud.netlab.build import enter_namespace
from flud.netlab.lab import Lab, load
from flud.testnet import launch

WHY = build.missing_prerequisites() or gateway.missing_miniupnpd()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DHT_TOOL = os.path.join(ROOT, "tests", "integration", "dht_tool.py")
MAPPED_WITHIN = 45.0


def in_namespace(namespace, *argv) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: enter_namespace(namespace))


def answer(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out + err
    return json.loads(out.splitlines()[-1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("portmap-lab"))
    prefix = "up" + secrets.token_hex(2)        # this test's own namespaces
    try:
        up = subprocess.run([sys.executable, "-m", "flud", "lab", "up", "--dir", directory,
                             "--public", "3", "--nat", "upnp:1,natpmp:1,igd:1", "--prefix", prefix,
                             "--timeout", "60"], capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        state = load(directory)
        wan = {d["namespace"]: d["wan"] for d in state["daemons"] if d["name"] == "stun"}
        yield state | {"directory": directory,
                       "wan": {h["name"]: wan[h["router"]] for h in state["hosts"]
                               if h["kind"] != "public"}}
    finally:
        Lab(directory).down()      # whatever happened: nothing left behind


def mapped_stats(lab):
    """{name: STATS} of the two nodes once both are public through their
    mapping (bounded wait)."""
    deadline = time.monotonic() + MAPPED_WITHIN
    while True:
        rows = {n["name"]: s for n, s in Lab(lab["directory"]).stats() if n["kind"] != "public"}
        done = all(s and s["reachability"]["verdict"] == "public" for s in rows.values())
        if done or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def test_a_node_behind_each_router_maps_its_port_and_is_confirmed_there(lab):
    rows = mapped_stats(lab)
    # behind `upnp` the first gateway found maps (NAT-PMP answers in
    # milliseconds, UPnP's SSDP in a second); the others have one way each
    for name, methods in (("n00", ("nat-pmp", "upnp-igd")), ("n01", ("nat-pmp",)),
                          ("n02", ("upnp-igd",))):
        stats, wan = rows[name], lab["wan"][name]
        assert stats is not None, f"{name} did not answer"
        mapping, reach = stats["port_mapping"], stats["reachability"]
        assert mapping["mapped"] == f"{wan}:7400" and mapping["method"] in methods, mapping
        # public peers dialled it back at the router's address: confirmed, published
        assert reach["verdict"] == "public", reach
        assert reach["confirmed"] == [f"{wan}:7400"] and reach["reached_by"] >= 2
        assert reach["published"] == [f"tcp:{wan}:7400"]        # no relay hint left
        assert stats["relay"]["reserved_on"] is None


def test_a_public_host_finds_the_direct_hint_and_connects_directly(lab):
    mapped_stats(lab)
    hosts = {h["name"]: h for h in lab["hosts"]}
    nodes = {n["name"]: n for n in lab["nodes"] if n["kind"] != "public"}
    asker = hosts["h002"]["namespace"]
    bootstrap = f"{hosts['h000']['address']}:7400"
    # a lookup through the DHT (asked of h000) finds each at its router's
    # address, confirmed by the node answering there (the new record
    # spreads in a few seconds: asked again until then, bounded)
    want = {name: f"{lab['wan'][name]}:7400" for name in nodes}
    found, deadline = {}, time.monotonic() + 30
    while found != want and time.monotonic() < deadline:
        lookups = {name: in_namespace(asker, DHT_TOOL, "locate",
                                      os.path.join(lab["directory"], f".locate-{name}"),
                                      bootstrap, node["node_id"])
                   for name, node in nodes.items() if found.get(name) != want[name]}
        found |= {name: answer(proc)["found"] for name, proc in lookups.items()}
    assert found == want
    # and a connection to that address (TLS + HELLO expecting its id) is answered
    targets = [{"name": name, "node_id": node["node_id"], "host": lab["wan"][name],
                "port": 7400, "pid": node["pid"], "start": node["start"]}
               for name, node in nodes.items()]
    stats = answer(in_namespace(asker, "-m", "flud.netlab.probe",
                                os.path.join(lab["directory"], ".probe-direct"),
                                json.dumps(targets)))
    assert {name: (s or {}).get("node_id") for name, s in stats.items()} == {
        name: node["node_id"] for name, node in nodes.items()}


def forwards(router_namespace) -> str:
    done = subprocess.run(["nft", "list", "chain", "inet", "fludlab", "prerouting_miniupnpd"],
                          capture_output=True, text=True, timeout=10,
                          preexec_fn=lambda: enter_namespace(router_namespace))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_stopping_node_drops_its_mapping_and_down_stops_miniupnpd(lab):
    mapped_stats(lab)
    hosts = {h["name"]: h for h in lab["hosts"]}
    routers = [hosts[name]["router"] for name in ("n00", "n01", "n02")]
    assert all("dport 7400 dnat" in forwards(r) for r in routers)
    stopping = [n for n in lab["nodes"] if n["kind"] != "public"]
    for node in stopping:
        os.kill(node["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 15
    while any(launch.node_running(n) for n in stopping) and time.monotonic() < deadline:
        time.sleep(0.2)
    # UPnP's DeletePortMapping and NAT-PMP's lifetime-0 request, each answered
    assert all("dnat" not in forwards(r) for r in routers)

    daemons = lab["daemons"]
    assert sorted(d["name"] for d in daemons) == ["miniupnpd"] * 3 + ["stun"] * 3
    assert all(launch.node_running(d) for d in daemons)
    Lab(lab["directory"]).down()
    assert not any(launch.node_running(d) for d in daemons)
    assert not set(lab["namespaces"]) & build.existing_namespaces()
