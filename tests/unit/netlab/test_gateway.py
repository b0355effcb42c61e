"""The lab's port-mapping routers without root: the STUN responder's codec,
the nftables ruleset and miniupnpd's configuration for each kind, and how
the topology names them (flud/netlab/stun.py, miniupnpd.py, topology.py)."""
import socket
import struct

import pytest

from flud.netlab import miniupnpd, nat, stun
from flud.netlab.topology import LabSpecError, build_topology, parse_nat


def binding_request(transaction=b"t" * 12, change=True):
    body = struct.pack("!HHI", 0x0003, 4, 0x06) if change else b""   # CHANGE-REQUEST
    return struct.pack("!HHI12s", 0x0001, len(body), 0x2112A442, transaction) + body


def test_stun_answers_a_binding_request_with_the_source_it_saw():
    reply = stun.binding_response(binding_request(), "198.18.200.1", 41798)
    kind, length, cookie, transaction = struct.unpack_from("!HHI12s", reply)
    assert (kind, length, cookie, transaction) == (0x0101, 12, 0x2112A442, b"t" * 12)
    attribute, size, _, family, port = struct.unpack_from("!HHBBH", reply, 20)
    assert (attribute, size, family) == (0x0020, 8, 1)
    assert port ^ 0x2112 == 41798
    address = bytes(a ^ b for a, b in zip(reply[28:32], struct.pack("!I", 0x2112A442)))
    assert socket.inet_ntoa(address) == "198.18.200.1"


def test_stun_ignores_what_is_not_a_binding_request():
    assert stun.binding_response(b"", "198.18.200.1", 1) is None
    assert stun.binding_response(binding_request()[:19], "198.18.200.1", 1) is None
    bad_cookie = bytearray(binding_request())
    bad_cookie[4] ^= 1
    assert stun.binding_response(bytes(bad_cookie), "198.18.200.1", 1) is None
    response = bytearray(binding_request())
    response[0:2] = b"\x01\x01"
    assert stun.binding_response(bytes(response), "198.18.200.1", 1) is None
    assert stun.binding_response(binding_request() + b"x", "198.18.200.1", 1) is None
    assert stun.binding_response(binding_request(), "fd00::1", 1) is None


@pytest.fixture(scope="module")
def topo():
    return build_topology("t", 2, parse_nat("upnp:1,natpmp:1,igd:1,cone:1"))


def test_mapping_kinds_are_sites_whose_nodes_should_be_reachable(topo):
    kinds = {h.name: (h.kind, h.expected_reachability) for h in topo.hosts
             if h.kind != "public"}
    assert kinds == {"n00": ("upnp", "public"), "n01": ("natpmp", "public"),
                     "n02": ("igd", "public"), "n03": ("cone", "private")}
    with pytest.raises(LabSpecError, match="upnp, natpmp, igd"):
        parse_nat("pcp:1")


def test_a_mapping_router_jumps_to_the_chains_miniupnpd_fills(topo):
    router = next(r for r in topo.routers if r.kind == "upnp")
    rules = nat.ruleset(router)
    for chain in ("prerouting_miniupnpd", "postrouting_miniupnpd", "miniupnpd"):
        assert f"chain {chain} {{" in rules and f"jump {chain}" in rules
    # what was not asked for stays out: replies, then forwards miniupnpd made
    forward = rules[rules.index("chain forward"):]
    assert forward.index("policy drop") < forward.index("established,related") < \
        forward.index("jump miniupnpd")
    assert 'oifname "wan" masquerade' in rules and "fully-random" not in rules
    cone = next(r for r in topo.routers if r.kind == "cone")
    assert "miniupnpd" not in nat.ruleset(cone)


def test_miniupnpd_speaks_what_its_kind_says_and_learns_its_address_by_stun(topo, tmp_path):
    configs = {r.kind: miniupnpd.miniupnpd_config(r, str(tmp_path))
               for r in topo.routers if r.kind in miniupnpd.KINDS}
    for kind, upnp, nat_pmp in (("upnp", "yes", "yes"), ("natpmp", "no", "yes"),
                                ("igd", "yes", "no")):
        lines = configs[kind].splitlines()
        assert f"enable_upnp={upnp}" in lines and f"enable_natpmp={nat_pmp}" in lines
        router = next(r for r in topo.routers if r.kind == kind)
        wan = router.wan_address.split("/")[0]
        # every address in 198.18.0.0/15: no ext_ip (refused as reserved), STUN instead
        assert "ext_perform_stun=yes" in lines and f"ext_stun_host={wan}" in lines
        assert not any(line.startswith("ext_ip=") for line in lines)
        assert "upnp_table_name=fludlab" in lines and "secure_mode=yes" in lines
        assert f"allow 1024-65535 {router.lan_address} 1024-65535" in lines
        assert lines[-1] == "deny 0-65535 0.0.0.0/0 0-65535"
        assert f"lease_file={tmp_path}/leases" in lines


def test_a_missing_or_iptables_miniupnpd_is_named_with_its_package(monkeypatch, tmp_path):
    from flud.netlab import gateway
    monkeypatch.setattr(gateway, "miniupnpd_path", lambda: None)
    assert "miniupnpd-nftables" in gateway.missing_miniupnpd()
    fake = tmp_path / "miniupnpd"
    fake.write_text("#!/bin/sh\necho 'miniupnpd 2.3.1 Dec 21 2022'\n"
                    "echo 'using netfilter(iptables) backend'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(gateway, "miniupnpd_path", lambda: str(fake))
    why = gateway.missing_miniupnpd()
    assert "not built for nftables" in why and "miniupnpd-nftables" in why
    fake.write_text("#!/bin/sh\necho 'miniupnpd 2.3.1'\necho 'using netfilter(nftables) backend'\n")
    assert gateway.missing_miniupnpd() is None
