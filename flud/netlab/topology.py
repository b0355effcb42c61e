"""The lab's shape, as data: which namespaces, links, addresses and NAT
routers a lab of P public hosts and some NATed sites is made of. Pure: it
runs nothing (flud/netlab/build.py turns a Topology into `ip`, `nft` and
`tc` commands and runs them).

One namespace per host, so that every node has its own address for what
it sends as well as for what it hears (a node's peers judge it by the
address they see it connect from), all on one switch:

    <p>-core     the "internet": a bridge `sw` that every WAN link plugs into
    <p>-hNNN     a public host: eth0 on the switch, 198.18.(1 + N).1 (each of
                 the first 199 in a /24 of its own, as homes on the internet
                 are: placement allows one share of an object per /24, so a
                 lab of one /24 would be one "host"; beyond 199 they share)
    <p>-rNN      a site's router: `wan` on the switch (198.18.(200 + N).1,
                 again a /24 each for the first 55), `lan`
                 towards its home, 198.19.N.1/24, nftables NAT between them
    <p>-nNN      a NATed host: eth0 = 198.19.N.2/24, default route via the router
    <p>-cNN      (double NAT) a carrier's router between the switch and the
                 home router: its inside link is 198.19.(128+N).0/24

Every address is in 198.18.0.0/15 (RFC 2544's benchmarking range) and lives
only inside the lab's namespaces. IPv6: public hosts also get a ULA on the
switch (fd00:f1d::/64 by default); NATed homes get none (the v6 routing of a
home network is not what the lab tests).
"""
import ipaddress
from dataclasses import dataclass, field

from flud.errors import FludError
from flud.netlab import miniupnpd

NAT_KINDS = ("cone", "symmetric", "double") + miniupnpd.KINDS
# routers that map a port on request (miniupnpd): a node behind one is reachable
MAPPING_KINDS = miniupnpd.KINDS
MAX_PUBLIC = 2000
MAX_SITES = 100
PREFIX_LENGTH_LIMIT = 6          # interface names are at most 15 bytes
WAN_NET = ipaddress.ip_network("198.18.0.0/16")
PUBLIC_BASE = ipaddress.ip_address("198.18.1.0")
ROUTER_BASE = ipaddress.ip_address("198.18.200.0")
PUBLIC_SUBNETS = 199              # 198.18.1.0/24 ... 198.18.199.0/24
ROUTER_SUBNETS = 55               # 198.18.200.0/24 ... 198.18.254.0/24
LAN_BASE = ipaddress.ip_address("198.19.0.0")
CARRIER_BASE = ipaddress.ip_address("198.19.128.0")
V6_NET = ipaddress.ip_network("fd00:f1d::/64")
NODE_PORT = 7400


class LabSpecError(FludError):
    """A lab that cannot be built as asked (the message says what to change)."""

    code = "LAB_SPEC"


@dataclass(frozen=True)
class Host:
    """A namespace where a node runs."""
    name: str          # short: "h000", "n01"
    namespace: str
    address: str       # what the node listens on (its own, maybe private)
    kind: str          # "public" or a NAT kind
    address6: str = ""  # a ULA, public hosts only
    router: str = ""   # the namespace of the router in front (NATed hosts)

    @property
    def expected_reachability(self) -> str:
        return "public" if self.kind == "public" or self.kind in MAPPING_KINDS else "private"


@dataclass(frozen=True)
class Router:
    namespace: str
    kind: str          # cone | symmetric | upnp | natpmp | igd | carrier (double NAT's outer)
    wan_if: str
    wan_address: str   # with its prefix length: "198.18.200.1/16"
    lan_if: str
    lan_address: str   # "198.19.1.1/24"


@dataclass(frozen=True)
class Link:
    """A veth pair: end a in namespace a, end b in namespace b. `bridge`:
    end b is plugged into that bridge (the core's switch)."""
    a_ns: str
    a_if: str
    b_ns: str
    b_if: str
    bridge: str = ""
    a_mac: str = ""    # a fixed MAC for end a (links onto the switch)


@dataclass(frozen=True)
class Address:
    namespace: str
    interface: str
    address: str       # with prefix length


@dataclass(frozen=True)
class Route:
    namespace: str
    via: str


@dataclass
class Topology:
    prefix: str
    core: str
    hosts: list = field(default_factory=list)
    routers: list = field(default_factory=list)
    links: list = field(default_factory=list)
    addresses: list = field(default_factory=list)
    routes: list = field(default_factory=list)
    delay_ms: float = 0.0   # one-way delay on each WAN egress (RTT = 2x)

    def namespaces(self) -> list:
        """Every namespace, in the order they are made (the core first)."""
        names = [self.core]
        names += [r.namespace for r in self.routers]
        names += [h.namespace for h in self.hosts]
        return names

    def switch_members(self) -> list:
        """[(namespace, interface, mac, [addresses without prefix])] of
        every link onto the switch: each gets a permanent neighbour entry
        for every other (see build.namespace_batches)."""
        found = []
        for link in self.links:
            if link.bridge:
                addresses = [a.address.split("/")[0] for a in self.addresses
                             if a.namespace == link.a_ns and a.interface == link.a_if]
                found.append((link.a_ns, link.a_if, link.a_mac, addresses))
        return found


ROUTER_MAC_BASE = 0x8000


def switch_mac(index: int) -> str:
    """A fixed, locally administered MAC for the index-th link onto the
    switch (the lab's segment is its own: no clash with anything else)."""
    return "02:00:c6:12:%02x:%02x" % (index >> 8 & 0xff, index & 0xff)


def parse_nat(text: str) -> list:
    """'cone:2,symmetric:1,double:1' -> [("cone", 2), ("symmetric", 1), ("double", 1)]."""
    sites = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        kind, sep, count = part.partition(":")
        if kind not in NAT_KINDS:
            raise LabSpecError(f"NAT kind {kind!r}: use one of {', '.join(NAT_KINDS)}")
        if sep and not count.isdigit():
            raise LabSpecError(f"{part!r}: want KIND:COUNT, e.g. cone:2")
        sites.append((kind, int(count) if sep else 1))
    return sites


def _nth(base, n: int) -> str:
    return str(base + n)


def public_address(i: int) -> str:
    """Public host i: a /24 of its own for the first PUBLIC_SUBNETS hosts
    (198.18.1.1, 198.18.2.1, ...), then a second address in each, and so on."""
    return _nth(PUBLIC_BASE, 256 * (i % PUBLIC_SUBNETS) + 1 + i // PUBLIC_SUBNETS)


def router_address(j: int) -> str:
    """Router j's WAN address: a /24 of its own for the first ROUTER_SUBNETS."""
    return _nth(ROUTER_BASE, 256 * (j % ROUTER_SUBNETS) + 1 + 2 * (j // ROUTER_SUBNETS))


def build_topology(prefix: str, public: int, nat_sites: list, delay_ms: float = 0.0,
                   ipv6: bool = True) -> Topology:
    """The lab for `public` public hosts and nat_sites [(kind, count)], one
    node per host, named from `prefix` (a few lowercase letters and digits)."""
    if not (prefix.isalnum() and prefix.islower() and 1 <= len(prefix) <= PREFIX_LENGTH_LIMIT):
        raise LabSpecError(f"prefix {prefix!r}: 1 to {PREFIX_LENGTH_LIMIT} lowercase letters/digits")
    if not 1 <= public <= MAX_PUBLIC:
        raise LabSpecError(f"--public {public}: from 1 to {MAX_PUBLIC} (the first is the bootstrap)")
    if delay_ms < 0 or delay_ms > 10_000:
        raise LabSpecError(f"delay {delay_ms} ms: from 0 to 10000")
    site_kinds = [kind for kind, count in nat_sites for _ in range(count)]
    if len(site_kinds) > MAX_SITES:
        raise LabSpecError(f"{len(site_kinds)} NATed sites: at most {MAX_SITES}")
    core = f"{prefix}-core"
    topo = Topology(prefix=prefix, core=core, delay_ms=delay_ms)
    for i in range(public):
        ns = f"{prefix}-h{i:03d}"
        address = public_address(i)
        v6 = str(V6_NET[i + 1]) if ipv6 else ""
        topo.hosts.append(Host(f"h{i:03d}", ns, address, "public", address6=v6))
        topo.links.append(Link(ns, "eth0", core, f"{prefix}h{i}", bridge="sw",
                               a_mac=switch_mac(i)))
        topo.addresses.append(Address(ns, "eth0", f"{address}/{WAN_NET.prefixlen}"))
        if v6:
            topo.addresses.append(Address(ns, "eth0", f"{v6}/{V6_NET.prefixlen}"))
    for j, kind in enumerate(site_kinds):
        home_router = f"{prefix}-r{j:02d}"
        host_ns = f"{prefix}-n{j:02d}"
        lan = LAN_BASE + 256 * (j + 1)
        wan_address = f"{router_address(j)}/{WAN_NET.prefixlen}"
        if kind == "double":
            carrier = f"{prefix}-c{j:02d}"
            inside = CARRIER_BASE + 256 * (j + 1)
            topo.routers.append(Router(carrier, "carrier", "wan", wan_address,
                                       "cgn", f"{inside + 1}/24"))
            topo.links.append(Link(carrier, "wan", core, f"{prefix}c{j}", bridge="sw",
                                   a_mac=switch_mac(ROUTER_MAC_BASE + j)))
            topo.links.append(Link(carrier, "cgn", home_router, "wan"))
            topo.routers.append(Router(home_router, "cone", "wan", f"{inside + 2}/24",
                                       "lan", f"{lan + 1}/24"))
            topo.routes.append(Route(home_router, str(inside + 1)))
        else:
            topo.routers.append(Router(home_router, kind, "wan", wan_address,
                                       "lan", f"{lan + 1}/24"))
            topo.links.append(Link(home_router, "wan", core, f"{prefix}r{j}", bridge="sw",
                                   a_mac=switch_mac(ROUTER_MAC_BASE + j)))
        topo.links.append(Link(home_router, "lan", host_ns, "eth0"))
        topo.addresses.append(Address(host_ns, "eth0", f"{lan + 2}/24"))
        topo.routes.append(Route(host_ns, str(lan + 1)))
        topo.hosts.append(Host(f"n{j:02d}", host_ns, str(lan + 2), kind, router=home_router))
    for router in topo.routers:
        topo.addresses.append(Address(router.namespace, router.wan_if, router.wan_address))
        topo.addresses.append(Address(router.namespace, router.lan_if, router.lan_address))
    return topo
