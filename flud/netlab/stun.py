"""`python -m flud.netlab.stun ADDRESS PORT`: the lab's STUN responder
(RFC 8489 Binding only), for the miniupnpd of a mapping router
(flud/netlab/gateway.py).

Why the lab needs one: miniupnpd refuses to map ports on a WAN address it
counts as reserved, and the lab's addresses are all in 198.18.0.0/15
(RFC 2544's benchmarking range, on miniupnpd's reserved list). Its 2.3.1
(Debian 12) has no switch to allow that (`ext_allow_private_ipv4` came in
2.3.9) and refuses such an `ext_ip`; but with `ext_perform_stun=yes` it takes
the address a STUN server reports, whatever its range, once its four test
requests all come back from where they went, unchanged (no NAT, no filter
in the way). This responder, bound to the router's own WAN address, reports
each request's source: the WAN address and the port it was sent from, which
is the truth for a router that is itself the edge of the lab's "internet".

Pure codec (binding_response) and a small blocking loop that answers only
requests from the router itself (its own WAN address); CHANGE-REQUEST is
ignored (the lab has one address to answer from), which miniupnpd accepts.
"""
import socket
import struct
import sys

BINDING_REQUEST = 0x0001
BINDING_SUCCESS = 0x0101
MAGIC_COOKIE = 0x2112A442
XOR_MAPPED_ADDRESS = 0x0020
HEADER = struct.Struct("!HHI12s")
MAX_DATAGRAM = 548


def binding_response(request: bytes, source_host: str, source_port: int):
    """The Binding success response to request (bytes) from source, or None
    where request is not a STUN Binding request over IPv4."""
    if len(request) < HEADER.size:
        return None
    kind, length, cookie, transaction = HEADER.unpack_from(request)
    if kind != BINDING_REQUEST or cookie != MAGIC_COOKIE or length != len(request) - HEADER.size:
        return None
    try:
        packed = socket.inet_aton(source_host)
    except OSError:
        return None
    port = source_port ^ (MAGIC_COOKIE >> 16)
    address = bytes(a ^ b for a, b in zip(packed, struct.pack("!I", MAGIC_COOKIE)))
    attribute = struct.pack("!HHBBH", XOR_MAPPED_ADDRESS, 8, 0, 1, port) + address
    return HEADER.pack(BINDING_SUCCESS, len(attribute), MAGIC_COOKIE, transaction) + attribute


def serve(host: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    print("ready", flush=True)
    while True:
        data, (source_host, source_port) = sock.recvfrom(MAX_DATAGRAM)
        if source_host != host:
            continue      # only the router's own miniupnpd asks; nobody else is answered
        reply = binding_response(data, source_host, source_port)
        if reply is not None:
            sock.sendto(reply, (source_host, source_port))


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
