"""The nftables ruleset of a lab router, by NAT kind. Pure text.

- cone: masquerade as Linux does it by default, which keeps a connection's
  source port when it is free (port-preserving, endpoint-independent
  mapping for TCP: what most home routers do, and what lets a TCP hole
  punch through).
- symmetric: masquerade `fully-random` (iptables' --random-fully): every
  connection gets a random outside port, so the port a peer observes says
  nothing about the next connection's.
- carrier: the outer router of a double NAT (carrier-grade NAT, RFC 6888):
  port-preserving like a cone, in front of a home router that is one too.
- upnp, natpmp, igd: a cone that also maps ports on request (miniupnpd:
  flud/netlab/miniupnpd.py).

Every kind filters the same way: what comes from the WAN side is forwarded
only when it belongs to a connection made from inside (conntrack's
established/related); nothing inside is reachable unasked. A connection
opened unasked to the router itself is dropped silently, as most home
routers do ("stealth"), not refused: a refusal (RST) of a hole punch's first
SYN would also close the punching side's own mapping, and in a lab without
delay that SYN always arrives before the other side's has left
(docs/reachability.md, "Hole punching").
"""
from flud.netlab import miniupnpd
from flud.netlab.topology import Router

TABLE = "fludlab"
MASQUERADE = {"cone": "masquerade", "carrier": "masquerade",
              "symmetric": "masquerade fully-random"}


def ruleset(router: Router) -> str:
    """`nft -f -` input for router: one table, NAT out of the WAN, and a
    forward filter that lets only replies in."""
    if router.kind in miniupnpd.KINDS:
        return miniupnpd.ruleset(router)    # miniupnpd's chains besides
    try:
        masquerade = MASQUERADE[router.kind]
    except KeyError:
        raise ValueError(f"router kind {router.kind!r}: want one of {sorted(MASQUERADE)}") from None
    return f"""table inet {TABLE} {{
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "{router.wan_if}" {masquerade}
  }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{router.wan_if}" meta l4proto tcp ct state new drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "{router.lan_if}" oifname "{router.wan_if}" accept
  }}
}}
"""
