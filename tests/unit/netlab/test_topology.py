"""The lab's plan, checked without root: names, addresses, commands, rules."""
import ipaddress

import pytest

from flud.netlab import build, nat, natcheck
from flud.netlab.topology import LabSpecError, build_topology, parse_nat

LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")


def public_hosts(topo) -> list:
    return [h for h in topo.hosts if h.kind == "public"]


def natted_hosts(topo) -> list:
    return [h for h in topo.hosts if h.kind != "public"]


def test_parse_nat_reads_kinds_and_counts_and_refuses_the_rest():
    assert parse_nat("cone:2,symmetric:1, double") == [("cone", 2), ("symmetric", 1), ("double", 1)]
    assert parse_nat("") == []
    for bad in ("full-cone:1", "cone:x", "cone:-1"):
        with pytest.raises(LabSpecError):
            parse_nat(bad)


def test_every_v4_address_is_in_the_benchmarking_range_and_unique():
    topo = build_topology("fl1", 50, parse_nat("cone:2,symmetric:1,double:1"))
    assert len(public_hosts(topo)) == 50 and len(natted_hosts(topo)) == 4
    v4 = [a.address for a in topo.addresses if ":" not in a.address]
    interfaces = [ipaddress.ip_interface(a) for a in v4]
    assert all(i.ip in LAB_RANGE for i in interfaces)
    assert len({i.ip for i in interfaces}) == len(interfaces)
    v6 = [ipaddress.ip_interface(a.address) for a in topo.addresses if ":" in a.address]
    assert v6 and all(i.ip.is_private for i in v6)     # ULAs only


def test_names_fit_interface_and_namespace_limits_and_share_the_prefix():
    topo = build_topology("fl9abc", 120, parse_nat("double:3"))
    assert all(ns.startswith("fl9abc-") for ns in topo.namespaces())
    assert len(set(topo.namespaces())) == len(topo.namespaces())
    assert all(len(name) <= 15 for link in topo.links for name in (link.a_if, link.b_if))


def test_a_double_nat_site_has_two_routers_in_a_chain():
    topo = build_topology("fl1", 1, [("double", 1)])
    kinds = {r.namespace: r.kind for r in topo.routers}
    assert kinds == {"fl1-c00": "carrier", "fl1-r00": "cone"}
    assert any(l.a_ns == "fl1-c00" and l.b_ns == "fl1-r00" and not l.bridge for l in topo.links)
    host = natted_hosts(topo)[0]
    assert host.kind == "double" and host.expected_reachability == "private"


def test_bad_specs_are_refused_with_a_clear_error():
    for args in (("FL", 1, []), ("toolongname", 1, []), ("fl", 0, []), ("fl", 1, [("cone", 101)])):
        with pytest.raises(LabSpecError):
            build_topology(*args)


def test_batches_make_namespaces_first_and_plug_ports_into_the_switch():
    topo = build_topology("fl1", 2, [("cone", 1)], delay_ms=25)
    root = build.root_batch(topo).splitlines()
    assert root[:len(topo.namespaces())] == [f"netns add {ns}" for ns in topo.namespaces()]
    core = build.namespace_batches(topo)["fl1-core"]
    assert "link add sw type bridge" in core and "link set fl1h0 master sw" in core
    host = build.namespace_batches(topo)["fl1-n00"]
    assert "route add default via 198.19.1.1" in host
    assert "nodad" in build.namespace_batches(topo)["fl1-h000"]
    assert build.delay_batch(topo).count("netem delay 25ms") == 3   # 2 hosts + 1 router
    assert build.delay_batch(build_topology("fl1", 2, [])) == ""


def test_router_rules_per_kind():
    topo = build_topology("fl1", 1, parse_nat("cone:1,symmetric:1"))
    rules = {r.kind: nat.ruleset(r) for r in topo.routers}
    assert "masquerade\n" in rules["cone"] and "fully-random" not in rules["cone"]
    assert "masquerade fully-random" in rules["symmetric"]
    for text in rules.values():
        assert "policy drop" in text and "ct state established,related accept" in text
        # unasked connections to the router itself vanish (a punch's early SYN)
        assert "meta l4proto tcp ct state new drop" in text
    setup = build.router_setup(topo)
    assert all("ip_forward=1" in command for command, _ in setup.values())


def test_the_nat_judge_tells_kinds_apart():
    port = natcheck.SOURCE_PORT
    same = [("198.18.200.1", port), ("198.18.200.1", port)]
    assert natcheck.judge("cone", same) == "ok"
    assert natcheck.judge("symmetric", same) != "ok"
    spread = [("198.18.200.1", 51000), ("198.18.200.1", 61000)]
    assert natcheck.judge("symmetric", spread) == "ok"
    assert natcheck.judge("cone", spread) != "ok"
    assert natcheck.judge("cone", [("198.18.200.1", port), ("198.18.200.3", port)]) != "ok"


def test_switch_members_know_each_other_for_good_with_fixed_macs():
    """The kernel's neighbour table is shared by every namespace (1024
    entries by default): 50 hosts learning each other by ARP overflowed it."""
    topo = build_topology("fl1", 3, [("cone", 1)])
    members = topo.switch_members()
    macs = [mac for _, _, mac, _ in members]
    assert len(set(macs)) == len(macs) == 4 and all(m.startswith("02:") for m in macs)
    batch = build.namespace_batches(topo)["fl1-h000"]
    assert batch.count("nud permanent") == 2 * 2 + 1    # 2 hosts (v4+v6), 1 router
    assert "neigh replace 198.18.200.1 lladdr 02:00:c6:12:80:00 dev eth0 nud permanent" in batch
    assert "address 02:00:c6:12:00:00 type veth" in build.root_batch(topo)
