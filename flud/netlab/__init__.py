"""The network lab: network namespaces, veth links and nftables NAT routers
on one machine (addresses only in 198.18.0.0/15), with flud nodes spread over
public and NATed namespaces. A harness like flud.testnet; nothing imports it
but the command line and tests."""
