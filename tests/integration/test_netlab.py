"""The network lab for real: namespaces, NAT routers and nodes in them, and
a teardown that leaves nothing. Needs root, `ip` and `nft` (skipped, saying
so, without them; .ci/run installs nftables and iproute2)."""
import json
import os
import subprocess
import sys

import pytest

from flud.netlab import build, natcheck
from flud.netlab.lab import Lab, load

WHY = build.missing_prerequisites()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")


def flud(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "flud", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("lab"))
    try:
        up = flud("lab", "up", "--dir", directory, "--public", "3",
                  "--nat", "cone:1,symmetric:1,double:1", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
        yield load(directory) | {"directory": directory}
    finally:
        Lab(directory).down()     # whatever happened: nothing left behind


def test_every_node_runs_in_its_namespace_and_answers(lab):
    status = flud("lab", "status", "--dir", lab["directory"], "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["h000", "h001", "h002", "n00", "n01", "n02"]
    assert all(r["stats"] is not None for r in rows)
    present = build.existing_namespaces()
    assert all(ns in present for ns in lab["namespaces"])
    assert len(lab["namespaces"]) == 1 + 3 + 3 + 4   # core, hosts, NATed hosts, routers


def test_the_routers_behave_as_the_nat_kinds_they_are_named(lab):
    assert natcheck.report(lab) == {"n00": "ok", "n01": "ok", "n02": "ok"}


def test_down_removes_exactly_what_up_made(tmp_path):
    directory = str(tmp_path / "lab2")
    outsider = "flkeep-core"          # a namespace the lab did not make
    subprocess.run(["ip", "netns", "add", outsider], check=True)
    try:
        up = flud("lab", "up", "--dir", directory, "--public", "1", "--nat", "cone:1")
        assert up.returncode == 0, up.stdout + up.stderr
        state = load(directory)
        pids = [n["pid"] for n in state["nodes"]]
        again = flud("lab", "up", "--dir", directory, "--public", "1")
        assert again.returncode != 0 and "lab down" in again.stderr
        down = flud("lab", "down", "--dir", directory)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "deleted 4 namespace(s)" in down.stdout
        present = build.existing_namespaces()
        assert not present & set(state["namespaces"])
        assert outsider in present
        assert not any(os.path.exists(f"/proc/{pid}") and
                       open(f"/proc/{pid}/stat").read().split()[2] not in "ZX" for pid in pids)
        assert not os.path.exists(os.path.join(directory, "lab.json"))
    finally:
        Lab(directory).down()
        subprocess.run(["ip", "netns", "del", outsider])


def test_each_node_finds_out_whether_it_can_be_reached(lab):
    """Peers dial each node back at the address they see (DIAL_BACK): the
    public ones are confirmed on IPv4 and IPv6 (dual-stack, ULA in the lab)
    and publish only that; the NATed ones are judged private."""
    import time
    deadline = time.monotonic() + 30
    while True:
        rows = Lab(lab["directory"]).stats()
        verdicts = {n["name"]: (s or {}).get("reachability", {}) for n, s in rows}
        # judged, and each public node's IPv6 address confirmed too (its
        # dial-backs come in their own time; under load after the IPv4 ones)
        settled = all(v.get("verdict") in ("public", "private") for v in verdicts.values()) \
            and all(any(p.startswith("tcp6:") for p in verdicts[n["name"]].get("published", ()))
                    for n, _ in rows if n["kind"] == "public")
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {name: v.get("verdict") for name, v in verdicts.items()} == {
        n["name"]: n["expected"] for n, _ in rows}
    for n, _ in rows:
        published = verdicts[n["name"]]["published"]
        if n["kind"] == "public":
            assert f"tcp:{n['host']}:7400" in published
            assert any(p.startswith("tcp6:[fd00:f1d::") for p in published)
        else:
            assert not any(p.startswith("tcp") for p in published)   # nothing that failed
            observed = verdicts[n["name"]]["observed"][0]   # its router's WAN address
            assert observed.startswith("198.18.") and int(observed.split(".")[2]) >= 200


def test_natted_nodes_are_reached_through_their_relay(lab):
    """Each private node reserves on a public one and publishes relay:ID;
    a public host that cannot reach it directly asks its STATS through the
    relay: TLS and HELLO run end to end (the node's id is checked)."""
    import time
    lab_ = Lab(lab["directory"])
    deadline = time.monotonic() + 30
    while True:
        found = lab_.stats_through_relays()
        if all(found.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    ids = {n["name"]: n["node_id"] for n in lab["nodes"]}
    assert {name: (s or {}).get("node_id") for name, s in found.items()} == {
        name: ids[name] for name in ("n00", "n01", "n02")}
    for stats in found.values():
        assert stats["reachability"]["published"] == [
            "relay:" + stats["relay"]["reserved_on"]]
