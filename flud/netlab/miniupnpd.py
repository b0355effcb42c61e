"""A mapping router's nftables ruleset and miniupnpd's configuration, by
kind (upnp: UPnP-IGD and NAT-PMP/PCP; natpmp: NAT-PMP/PCP only; igd:
UPnP-IGD only). Pure text;
flud/netlab/gateway.py runs miniupnpd with it.

Both kinds NAT like a cone router (port-preserving masquerade) and filter
like every lab router; miniupnpd adds its forwards to chains of the
router's own nftables table. Debian 12's miniupnpd (2.3.1, package
`miniupnpd-nftables`) is built for nftables and only fills chains that exist
(upstream's nft_init.sh makes them): the ruleset below makes them and jumps
to them.

miniupnpd will not map on a WAN address in 198.18.0.0/15 (reserved in its
eyes) and refuses such an `ext_ip`; the lab keeps that range and lets it
learn the address the way a router behind nothing would: by STUN, from a
responder bound to the WAN address (flud/netlab/stun.py says why that passes).
"""
import os
import uuid

KINDS = ("upnp", "natpmp", "igd")
SPEAKS_UPNP = ("upnp", "igd")
SPEAKS_NATPMP = ("upnp", "natpmp")
STUN_PORT = 3478
HTTP_PORT = 5000          # UPnP's description and control (on the LAN side only)
NATPMP_PORT = 5351
TABLE = "fludlab"
FORWARD_CHAIN = "miniupnpd"
PREROUTING_CHAIN = "prerouting_miniupnpd"
POSTROUTING_CHAIN = "postrouting_miniupnpd"


def ruleset(router) -> str:
    """The router's table: a cone NAT whose chains jump to the ones
    miniupnpd fills (forwards in prerouting, their filter accepts)."""
    return f"""table inet {TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    jump {PREROUTING_CHAIN}
  }}
  chain {PREROUTING_CHAIN} {{
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    jump {POSTROUTING_CHAIN}
    oifname "{router.wan_if}" masquerade
  }}
  chain {POSTROUTING_CHAIN} {{
  }}
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    jump {FORWARD_CHAIN}
    iifname "{router.lan_if}" oifname "{router.wan_if}" accept
  }}
  chain {FORWARD_CHAIN} {{
  }}
}}
"""


def miniupnpd_config(router, files: str) -> str:
    """miniupnpd.conf for router; files: the directory of its lease file."""
    wan = router.wan_address.split("/")[0]
    lan_net = router.lan_address   # e.g. 198.19.1.1/24: hosts of that net may map
    upnp = "yes" if router.kind in SPEAKS_UPNP else "no"
    nat_pmp = "yes" if router.kind in SPEAKS_NATPMP else "no"
    return f"""# made by flud/netlab/gateway.py for {router.namespace}
ext_ifname={router.wan_if}
listening_ip={router.lan_if}
ipv6_disable=yes
http_port={HTTP_PORT}
enable_upnp={upnp}
enable_natpmp={nat_pmp}
ext_perform_stun=yes
ext_stun_host={wan}
ext_stun_port={STUN_PORT}
secure_mode=yes
system_uptime=no
notify_interval=60
clean_ruleset_interval=600
lease_file={os.path.join(files, "leases")}
uuid={uuid.uuid5(uuid.NAMESPACE_DNS, router.namespace + ".lab.flud")}
upnp_table_name={TABLE}
upnp_nat_table_name={TABLE}
upnp_forward_chain={FORWARD_CHAIN}
upnp_nat_chain={PREROUTING_CHAIN}
upnp_nat_postrouting_chain={POSTROUTING_CHAIN}
allow 1024-65535 {lan_net} 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
"""
