"""Signed node records: who a node is and how to reach it, in its own words.

A record names a node by its public key (the node id is SHA-256 of the key's
DER, as everywhere in flud), carries a sequence number, an expiry, roles,
the capacity it offers and up to MAX_ADDRESSES typed address hints, and is
signed with the node's own key. Anyone can check it; nobody but the node can
make one. The highest valid sequence wins, so a node that moves publishes a
new record and the old address dies out; an expired record is dropped, so a
node that is gone for good leaves every view within RECORD_LIFETIME.

Layout (all integers big-endian), version 1:

    u8  version (1)
    64  public key: the P-256 point x || y (the SPKI is rebuilt from it:
        one key, one encoding, one id)
    u64 sequence
    u64 expires (unix seconds)
    u8  roles (ROLE_STORE | ROLE_RELAY)
    u64 offered capacity in bytes (0: not said)
    u8  address count (<= MAX_ADDRESSES), then each: u8 length, ASCII hint
    u8  signature length, then the DER ECDSA signature over
        SIGNING_CONTEXT + everything above

Pure: no I/O, no clock (callers pass `now`).
"""
from __future__ import annotations

import functools
import ipaddress
import struct
from dataclasses import dataclass

from flud.errors import FludError
from flud.keys import Identity

RECORD_VERSION = 1
SIGNING_CONTEXT = b"flud node record v1\x00"
MAX_ADDRESSES = 8
MAX_ADDRESS_TEXT = 200
MAX_SIGNATURE = 80
MAX_RECORD = 1 + 64 + 8 + 8 + 1 + 8 + 1 + MAX_ADDRESSES * (1 + MAX_ADDRESS_TEXT) + 1 + MAX_SIGNATURE
# A record may not claim to live longer than this from the moment it is
# checked: a stolen or replayed record must die out on its own.
MAX_LIFETIME = 7 * 24 * 3600
RECORD_LIFETIME = 24 * 3600     # what a node signs for itself
REFRESH_BEFORE = 6 * 3600       # a node re-signs when less than this is left
CLOCK_SLACK = 300               # peers' clocks disagree by minutes, not days

ROLE_STORE = 0x01
ROLE_RELAY = 0x02

_HEAD = struct.Struct(">B64sQQBQ")
_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004")
_SCHEMES = ("tcp", "tcp6", "relay")


class RecordRefused(FludError):
    """A node record that is not taken, with a stable code saying why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _refused(code, message):
    return RecordRefused(code, message)


@dataclass(frozen=True, slots=True)
class Address:
    """A typed address hint: tcp (IPv4 or a name), tcp6, or relay (the node
    id of a relay that holds a reservation for this node)."""
    scheme: str
    host: str = ""
    port: int = 0
    relay_id: bytes = b""

    def text(self) -> str:
        if self.scheme == "relay":
            return "relay:" + self.relay_id.hex()
        if self.scheme == "tcp6":
            return f"tcp6:[{self.host}]:{self.port}"
        return f"tcp:{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "Address":
        scheme, sep, rest = text.partition(":")
        if not sep or scheme not in _SCHEMES:
            raise _refused("RECORD_MALFORMED", f"address {text!r}: unknown scheme")
        if scheme == "relay":
            try:
                relay_id = bytes.fromhex(rest)
            except ValueError:
                relay_id = b""
            if len(relay_id) != 32:
                raise _refused("RECORD_MALFORMED", f"address {text!r}: not a node id")
            return cls("relay", relay_id=relay_id)
        if scheme == "tcp6":
            if not rest.startswith("["):
                raise _refused("RECORD_MALFORMED", f"address {text!r}: want [addr]:port")
            host, _, port = rest[1:].partition("]:")
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise _refused("RECORD_MALFORMED", f"address {text!r}: not IPv6") from None
        else:
            host, _, port = rest.rpartition(":")
            if not host or any(c in host for c in "[]/ "):
                raise _refused("RECORD_MALFORMED", f"address {text!r}: bad host")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise _refused("RECORD_MALFORMED", f"address {text!r}: bad port")
        return cls(scheme, host, int(port))

    @classmethod
    def tcp(cls, host: str, port: int) -> "Address":
        if ":" in host:
            return cls("tcp6", host, port)
        return cls("tcp", host, port)


# A node's id is the hash of its key: asked of the same records thousands of
# times per lookup (a client's walks took 12,000 hashes, 0.1 s of CPU), so
# each key's is kept once (bounded, as find_node's checked cache).
@functools.lru_cache(maxsize=4096)
def _node_id_of(public_xy: bytes) -> bytes:
    return Identity.node_id_of(_SPKI_PREFIX + public_xy)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    public_xy: bytes
    sequence: int
    expires: int
    roles: int
    capacity: int
    addresses: tuple
    signature: bytes = b""

    @property
    def public_der(self) -> bytes:
        return _SPKI_PREFIX + self.public_xy

    @property
    def node_id(self) -> bytes:
        return _node_id_of(self.public_xy)

    def body(self) -> bytes:
        parts = [_HEAD.pack(RECORD_VERSION, self.public_xy, self.sequence, self.expires,
                            self.roles, self.capacity), bytes([len(self.addresses)])]
        for address in self.addresses:
            text = address.text().encode("ascii")
            parts.append(bytes([len(text)]) + text)
        return b"".join(parts)

    def encode(self) -> bytes:
        return self.body() + bytes([len(self.signature)]) + self.signature

    def tcp_addresses(self) -> list:
        return [a for a in self.addresses if a.scheme in ("tcp", "tcp6")]

    def first_tcp(self):
        """(host, port) of the first direct address, or None."""
        direct = self.tcp_addresses()
        return (direct[0].host, direct[0].port) if direct else None

    def relay_ids(self) -> list:
        """The node ids of the relays this node holds reservations on."""
        return [a.relay_id for a in self.addresses if a.scheme == "relay"]

    def dial_address(self):
        """(host, port) to reach this node: its first direct address, else
        ("relay:RELAY_ID_HEX", 0) for its first relay (flud.protocol.pool
        dials those through the relay), else None."""
        direct = self.first_tcp()
        if direct is not None:
            return direct
        relays = self.relay_ids()
        return ("relay:" + relays[0].hex(), 0) if relays else None


def sign_record(identity: Identity, sequence: int, expires: int, addresses,
                roles: int = ROLE_STORE, capacity: int = 0) -> NodeRecord:
    addresses = tuple(addresses)
    if len(addresses) > MAX_ADDRESSES:
        raise ValueError(f"a record holds at most {MAX_ADDRESSES} addresses")
    public_xy = identity.public_der[len(_SPKI_PREFIX):]
    unsigned = NodeRecord(public_xy, sequence, expires, roles, capacity, addresses)
    return NodeRecord(public_xy, sequence, expires, roles, capacity, addresses,
                      identity.sign(SIGNING_CONTEXT + unsigned.body()))


def decode_record(data: bytes) -> NodeRecord:
    """Parse one record; RecordRefused(RECORD_MALFORMED) on anything off.
    The signature is not checked here: see check_record."""
    if len(data) > MAX_RECORD:
        raise _refused("RECORD_MALFORMED", f"record of {len(data)} bytes, over {MAX_RECORD}")
    if len(data) < _HEAD.size + 2:
        raise _refused("RECORD_MALFORMED", "record is truncated")
    version, public_xy, sequence, expires, roles, capacity = _HEAD.unpack_from(data)
    if version != RECORD_VERSION:
        raise _refused("RECORD_VERSION", f"record version {version}, this node reads {RECORD_VERSION}")
    pos = _HEAD.size
    count = data[pos]
    pos += 1
    if count > MAX_ADDRESSES:
        raise _refused("RECORD_MALFORMED", f"record lists {count} addresses, over {MAX_ADDRESSES}")
    addresses = []
    for _ in range(count):
        if pos >= len(data):
            raise _refused("RECORD_MALFORMED", "record is truncated")
        length = data[pos]
        text = data[pos + 1:pos + 1 + length]
        if len(text) != length or length > MAX_ADDRESS_TEXT:
            raise _refused("RECORD_MALFORMED", "record address is truncated or too long")
        try:
            addresses.append(Address.parse(text.decode("ascii")))
        except UnicodeDecodeError:
            raise _refused("RECORD_MALFORMED", "record address is not ASCII") from None
        pos += 1 + length
    if pos >= len(data):
        raise _refused("RECORD_MALFORMED", "record is truncated")
    sig_length = data[pos]
    signature = data[pos + 1:pos + 1 + sig_length]
    if len(signature) != sig_length or sig_length > MAX_SIGNATURE:
        raise _refused("RECORD_MALFORMED", "record signature is truncated or too long")
    if pos + 1 + sig_length != len(data):
        raise _refused("RECORD_MALFORMED", "record has trailing bytes")
    return NodeRecord(public_xy, sequence, expires, roles, capacity, tuple(addresses),
                      bytes(signature))


def check_record(record: NodeRecord, now: float) -> NodeRecord:
    """The record if it is signed by its own key and alive now; else
    RecordRefused with RECORD_BAD_SIGNATURE, RECORD_EXPIRED or
    RECORD_TOO_LONG (an expiry further out than MAX_LIFETIME)."""
    if record.expires + CLOCK_SLACK < now:
        raise _refused("RECORD_EXPIRED", f"record of {record.node_id.hex()[:12]} expired")
    if record.expires > now + MAX_LIFETIME + CLOCK_SLACK:
        raise _refused("RECORD_TOO_LONG", f"record of {record.node_id.hex()[:12]} claims to "
                       f"live {int(record.expires - now)} s, over {MAX_LIFETIME}")
    if not Identity.verify(record.public_der, SIGNING_CONTEXT + record.body(), record.signature):
        raise _refused("RECORD_BAD_SIGNATURE", "record signature does not verify")
    return record


def newer(candidate: NodeRecord, known) -> bool:
    """Does `candidate` replace `known` (None: nothing known)? The higher
    sequence wins; an equal sequence never replaces (the first one seen
    stays: a node never signs two records with one sequence)."""
    return known is None or candidate.sequence > known.sequence
