"""Typed message bodies and their byte layouts (docs/protocol.md section 4).

Each message class has `encode() -> bytes` and `decode(payload) -> message`.
Decoding never trusts a length field: every read is bounds-checked and a bad
body raises RemoteError(MALFORMED).
"""
import json
import struct
from dataclasses import dataclass, field

from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, MAX_ERROR_MESSAGE, RemoteError, wire_of
from flud.protocol.node_record import MAX_RECORD, NodeRecord, RecordRefused, decode_record

PROTOCOL_VERSION = 1
KEY_SIZE = 32
TO_END = (1 << 64) - 1
MAX_NONCE = 64
MAX_PEERS_LIST = 1024
MAX_ROOT_RECORD = 64 * 1024
MAX_STATS_BODY = 64 * 1024
MAX_PUBLIC_KEY = 512
MAX_SIGNATURE = 128

ROLE_NODE = 1
ROLE_CLIENT = 2

KIND_SHARE = 0
KIND_ARCHIVE = 1
# A share sent before its key is known: the key field is zero and the data is
# the share then its 32-byte key.
KIND_STREAMED_SHARE = 2
_KIND_NAMES = {KIND_SHARE: "share", KIND_ARCHIVE: "archive",
               KIND_STREAMED_SHARE: "streamed share"}
NO_KEY = bytes(KEY_SIZE)

PEER_ALIVE = 0x01


def malformed(what: str) -> RemoteError:
    return RemoteError(ErrorCode.MALFORMED, what)


class Reader:
    """Bounds-checked reads over one message body."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str):
        self._data = data
        self._pos = 0
        self._what = what

    def take(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise malformed(f"{self._what} body is truncated")
        chunk = self._data[self._pos:end]
        self._pos = end
        return chunk

    def unpack(self, fmt: struct.Struct):
        return fmt.unpack(self.take(fmt.size))

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def rest(self) -> bytes:
        chunk = self._data[self._pos:]
        self._pos = len(self._data)
        return chunk

    def done(self) -> None:
        if self._pos != len(self._data):
            raise malformed(f"{self._what} body has trailing bytes")


_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_KEY_RANGE = struct.Struct(">32sQQ")
_STORE_HEAD = struct.Struct(">32sBQ")


def _key(reader: Reader) -> bytes:
    return reader.take(KEY_SIZE)


def _check_key(key: bytes) -> bytes:
    # struct's "32s" would silently pad or cut a wrong-sized key into another key.
    if len(key) != KEY_SIZE:
        raise RemoteError(ErrorCode.BAD_KEY, f"a key is {KEY_SIZE} bytes, not {len(key)}")
    return key


@dataclass(slots=True)
class Hello:
    version: int
    role: int
    listen_port: int
    public_key: bytes
    signature: bytes
    listen_host: str = ""

    def encode(self) -> bytes:
        host = self.listen_host.encode()
        return (struct.pack(">HBHH", self.version, self.role, self.listen_port,
                            len(self.public_key)) + self.public_key
                + _U16.pack(len(self.signature)) + self.signature
                + bytes([len(host)]) + host)

    @classmethod
    def decode(cls, payload: bytes) -> "Hello":
        r = Reader(payload, "HELLO")
        version, role = r.u16(), r.u8()
        port = r.u16()
        key_len = r.u16()
        if key_len > MAX_PUBLIC_KEY:
            raise malformed("HELLO public key is too long")
        public_key = r.take(key_len)
        sig_len = r.u16()
        if sig_len > MAX_SIGNATURE:
            raise malformed("HELLO signature is too long")
        signature = r.take(sig_len)
        host = _text(r.take(r.u8()), "HELLO host")
        r.done()
        if role not in (ROLE_NODE, ROLE_CLIENT):
            raise malformed(f"HELLO role {role} is unknown")
        return cls(version, role, port, public_key, signature, host)


@dataclass(slots=True)
class Empty:
    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, payload: bytes) -> "Empty":
        if payload:
            raise malformed("expected an empty body")
        return cls()


@dataclass(slots=True, frozen=True)
class PeerEntry:
    """One PEERS entry: a node's signed record (flud.protocol.node_record)
    and the sender's own hint whether it answered lately. The hint is
    hearsay: a receiver uses it only to try live-looking nodes first."""
    record: NodeRecord
    alive: bool = True

    @property
    def node_id(self) -> bytes:
        return self.record.node_id


@dataclass(slots=True)
class PeerList:
    """PEERS carries signed node records only (docs/protocol.md): each entry
    is u8 flags, u16 length, the record. A record that does not parse makes
    the body MALFORMED; signatures, expiry and sequence are the receiver's
    to check (flud.protocol.node_record.check_record)."""
    peers: list = field(default_factory=list)

    def encode(self) -> bytes:
        parts = [_U16.pack(len(self.peers))]
        for entry in self.peers:
            raw = entry.record.encode()
            parts.append(bytes([PEER_ALIVE if entry.alive else 0]) + _U16.pack(len(raw)) + raw)
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> "PeerList":
        r = Reader(payload, "PEERS")
        count = r.u16()
        if count > MAX_PEERS_LIST:
            raise malformed(f"PEERS lists {count} peers, over {MAX_PEERS_LIST}")
        peers = []
        for _ in range(count):
            flags = r.u8()
            length = r.u16()
            if length > MAX_RECORD:
                raise malformed(f"PEERS record of {length} bytes, over {MAX_RECORD}")
            try:
                record = decode_record(r.take(length))
            except RecordRefused as err:
                raise malformed(f"PEERS record: {err}") from None
            peers.append(PeerEntry(record, bool(flags & PEER_ALIVE)))
        r.done()
        return cls(peers)


@dataclass(slots=True)
class Stats:
    values: dict

    def encode(self) -> bytes:
        body = json.dumps(self.values, separators=(",", ":")).encode()
        if len(body) > MAX_STATS_BODY:
            raise RemoteError(ErrorCode.TOO_LARGE, "stats body is too large")
        return body

    @classmethod
    def decode(cls, payload: bytes) -> "Stats":
        if len(payload) > MAX_STATS_BODY:
            raise RemoteError(ErrorCode.TOO_LARGE, "stats body is too large")
        try:
            values = json.loads(payload)
        except ValueError:
            raise malformed("STATS body is not JSON") from None
        if not isinstance(values, dict):
            raise malformed("STATS body is not a JSON object")
        return cls(values)


@dataclass(slots=True)
class StoreRequest:
    key: bytes
    kind: int
    size: int
    data: bytes = b""  # the first bytes; DATA frames carry the rest

    def encode(self) -> bytes:
        return _STORE_HEAD.pack(_check_key(self.key), self.kind, self.size) + self.data

    @classmethod
    def decode(cls, payload: bytes) -> "StoreRequest":
        r = Reader(payload, "STORE")
        key, kind, size = r.unpack(_STORE_HEAD)
        if kind not in _KIND_NAMES:
            raise malformed(f"STORE kind {kind} is unknown")
        if kind == KIND_STREAMED_SHARE and key != NO_KEY:
            raise malformed("a streamed share's key field must be zero: its key follows its data")
        request = cls(key, kind, size, r.rest())
        if len(request.data) > request.data_length:
            raise malformed("STORE carries more bytes than its size")
        return request

    @property
    def kind_name(self) -> str:
        return _KIND_NAMES[self.kind]

    @property
    def data_length(self) -> int:
        """The bytes that follow the head: size, plus the key of a streamed share."""
        return self.size + KEY_SIZE if self.kind == KIND_STREAMED_SHARE else self.size

    @property
    def content_key(self) -> bytes | None:
        """The key, or None for a streamed share (whose key ends its data)."""
        return None if self.kind == KIND_STREAMED_SHARE else self.key


@dataclass(slots=True)
class RetrieveRequest:
    key: bytes
    offset: int = 0
    length: int = TO_END

    def encode(self) -> bytes:
        return _KEY_RANGE.pack(_check_key(self.key), self.offset, self.length)

    @classmethod
    def decode(cls, payload: bytes) -> "RetrieveRequest":
        r = Reader(payload, "RETRIEVE")
        key, offset, length = r.unpack(_KEY_RANGE)
        r.done()
        return cls(key, offset, length)


@dataclass(slots=True)
class RetrieveResponse:
    total: int
    data: bytes = b""

    def encode(self) -> bytes:
        return _U64.pack(self.total) + self.data

    @classmethod
    def decode(cls, payload: bytes) -> "RetrieveResponse":
        r = Reader(payload, "RETRIEVE response")
        total = r.u64()
        data = r.rest()
        if len(data) > total:
            raise malformed("RETRIEVE response carries more than its total")
        return cls(total, data)


@dataclass(slots=True)
class VerifyRequest:
    key: bytes
    nonce: bytes
    offset: int = 0
    length: int = TO_END

    def encode(self) -> bytes:
        return (_KEY_RANGE.pack(_check_key(self.key), self.offset, self.length)
                + bytes([len(self.nonce)]) + self.nonce)

    @classmethod
    def decode(cls, payload: bytes) -> "VerifyRequest":
        r = Reader(payload, "VERIFY")
        key, offset, length = r.unpack(_KEY_RANGE)
        nonce_len = r.u8()
        if not 1 <= nonce_len <= MAX_NONCE:
            raise malformed(f"VERIFY nonce must be 1..{MAX_NONCE} bytes")
        nonce = r.take(nonce_len)
        r.done()
        return cls(key, nonce, offset, length)


@dataclass(slots=True)
class Digest:
    digest: bytes

    def encode(self) -> bytes:
        return self.digest

    @classmethod
    def decode(cls, payload: bytes) -> "Digest":
        if len(payload) != 32:
            raise malformed("VERIFY answer must be a 32-byte digest")
        return cls(payload)


@dataclass(slots=True)
class KeyOnly:
    key: bytes

    def encode(self) -> bytes:
        return _check_key(self.key)

    @classmethod
    def decode(cls, payload: bytes) -> "KeyOnly":
        r = Reader(payload, "DELETE")
        key = r.take(KEY_SIZE)
        r.done()
        return cls(key)


@dataclass(slots=True)
class Record:
    record: bytes

    def encode(self) -> bytes:
        return self.record

    @classmethod
    def decode(cls, payload: bytes) -> "Record":
        if len(payload) > MAX_ROOT_RECORD:
            raise RemoteError(ErrorCode.TOO_LARGE,
                              f"root record is over {MAX_ROOT_RECORD} bytes")
        return cls(payload)


MAX_LINK_BODY = 1024


@dataclass(slots=True)
class LinkBody:
    """LINK: one client-node link record (flud/trust/link.py checks it)."""
    link: bytes

    def encode(self) -> bytes:
        return self.link

    @classmethod
    def decode(cls, payload: bytes) -> "LinkBody":
        if len(payload) > MAX_LINK_BODY:
            raise RemoteError(ErrorCode.TOO_LARGE, f"link record is over {MAX_LINK_BODY} bytes")
        return cls(bytes(payload))


@dataclass(slots=True)
class ErrorBody:
    code: int  # on the wire: ErrorCode.X.wire (an ErrorCode is taken too)
    message: str

    def encode(self) -> bytes:
        text = self.message.encode("utf-8", "replace")[:MAX_ERROR_MESSAGE]
        return _U16.pack(wire_of(self.code)) + text

    @classmethod
    def decode(cls, payload: bytes) -> "ErrorBody":
        r = Reader(payload, "ERROR")
        code = r.u16()
        return cls(code, r.rest()[:MAX_ERROR_MESSAGE].decode("utf-8", "replace"))


MAX_HOST_TEXT = 64
DIAL_OK = 0
DIAL_FAILED = 1


def _host_text(r: Reader, what: str) -> str:
    length = r.u8()
    if length > MAX_HOST_TEXT:
        raise malformed(f"{what} host of {length} bytes, over {MAX_HOST_TEXT}")
    try:
        return r.take(length).decode("ascii")
    except UnicodeDecodeError:
        raise malformed(f"{what} host is not ASCII") from None


def _host_bytes(host: str) -> bytes:
    raw = host.encode("ascii")[:MAX_HOST_TEXT]
    return bytes([len(raw)]) + raw


@dataclass(slots=True)
class DialBackRequest:
    """Dial me back on `port` at the address you see me at. `host`, when
    given, must be that address (a node never dials a third party: the
    answer is DIAL_THIRD_PARTY); empty means the observed one."""
    port: int
    host: str = ""

    def encode(self) -> bytes:
        return _U16.pack(self.port) + _host_bytes(self.host)

    @classmethod
    def decode(cls, payload: bytes) -> "DialBackRequest":
        r = Reader(payload, "DIAL_BACK")
        port = r.u16()
        host = _host_text(r, "DIAL_BACK")
        r.done()
        if not port:
            raise malformed("DIAL_BACK port 0")
        return cls(port, host)


@dataclass(slots=True)
class DialBackResponse:
    """What the asked node saw (the asker's address and source port: the
    observed address) and whether its dial to observed_host:port reached
    the asker (TLS and HELLO proving the asker's key)."""
    status: int
    observed_host: str
    observed_port: int

    @property
    def reached(self) -> bool:
        return self.status == DIAL_OK

    def encode(self) -> bytes:
        return bytes([self.status]) + _U16.pack(self.observed_port) + _host_bytes(self.observed_host)

    @classmethod
    def decode(cls, payload: bytes) -> "DialBackResponse":
        r = Reader(payload, "DIAL_BACK answer")
        status = r.u8()
        port = r.u16()
        host = _host_text(r, "DIAL_BACK answer")
        r.done()
        return cls(status, host, port)


@dataclass(slots=True)
class Reservation:
    """RESERVE's answer: the reservation lasts `seconds` (renew before)."""
    seconds: int

    def encode(self) -> bytes:
        return struct.pack(">I", self.seconds)

    @classmethod
    def decode(cls, payload: bytes) -> "Reservation":
        r = Reader(payload, "RESERVE answer")
        (seconds,) = r.unpack(struct.Struct(">I"))
        r.done()
        return cls(seconds)


@dataclass(slots=True)
class Circuit:
    """RELAY_INCOMING: connect to the relay with this token (ACCEPT)."""
    token: bytes

    def encode(self) -> bytes:
        return self.token

    @classmethod
    def decode(cls, payload: bytes) -> "Circuit":
        if len(payload) != 16:
            raise malformed("RELAY_INCOMING token is 16 bytes")
        return cls(bytes(payload))


# A PUNCH_CONNECT names at most this many addresses (flud/node/hole_punch.py).
MAX_PUNCH_ADDRESSES = 4


@dataclass(slots=True)
class PunchConnect:
    """PUNCH_CONNECT, and its answer: the sender's addresses as peers
    observed them ((host, port): its NAT's outside address, its listening
    port) and how its NAT maps ports (hole_punch.NAT_*), for a hole punch
    over the relayed connection it is sent on."""
    addresses: list
    nat: int = 0

    def encode(self) -> bytes:
        parts = [bytes([self.nat, len(self.addresses[:MAX_PUNCH_ADDRESSES])])]
        for host, port in self.addresses[:MAX_PUNCH_ADDRESSES]:
            parts.append(_U16.pack(port) + _host_bytes(host))
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> "PunchConnect":
        r = Reader(payload, "PUNCH_CONNECT")
        nat, count = r.u8(), r.u8()
        if count > MAX_PUNCH_ADDRESSES:
            raise malformed(f"PUNCH_CONNECT names {count} addresses, over {MAX_PUNCH_ADDRESSES}")
        addresses = []
        for _ in range(count):
            port = r.u16()
            host = _host_text(r, "PUNCH_CONNECT")
            if not port or not host:
                raise malformed("PUNCH_CONNECT address without a host or a port")
            addresses.append((host, port))
        r.done()
        return cls(addresses, nat)


@dataclass(slots=True)
class PunchSync:
    """PUNCH_SYNC: dial now; `attempt` counts from 1 (bounded by the asked)."""
    attempt: int

    def encode(self) -> bytes:
        return bytes([self.attempt])

    @classmethod
    def decode(cls, payload: bytes) -> "PunchSync":
        r = Reader(payload, "PUNCH_SYNC")
        attempt = r.u8()
        r.done()
        return cls(attempt)


@dataclass(slots=True)
class Observed:
    """OBSERVED's answer: the address and source port the answerer sees
    the asker's connection come from."""
    host: str
    port: int

    def encode(self) -> bytes:
        return _U16.pack(self.port) + _host_bytes(self.host)

    @classmethod
    def decode(cls, payload: bytes) -> "Observed":
        r = Reader(payload, "OBSERVED answer")
        port = r.u16()
        host = _host_text(r, "OBSERVED answer")
        r.done()
        return cls(host, port)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed(f"{what} is not utf-8") from None


# A FIND_NODE answer names at most this many nodes (Kademlia's k).
MAX_FOUND = 20


@dataclass(slots=True)
class FindNode:
    """FIND_NODE: the 32-byte id looked for, then optionally the asker's own
    signed record (u16 length + record; a node sends it so that the nodes it
    asks can learn it, once they dialled it back; a client sends none)."""
    target: bytes
    record: NodeRecord | None = None

    def encode(self) -> bytes:
        raw = self.record.encode() if self.record is not None else b""
        return _check_key(self.target) + _U16.pack(len(raw)) + raw

    @classmethod
    def decode(cls, payload: bytes) -> "FindNode":
        r = Reader(payload, "FIND_NODE")
        target = _key(r)
        length = r.u16()
        if length > MAX_RECORD:
            raise malformed(f"FIND_NODE record of {length} bytes, over {MAX_RECORD}")
        record = None
        if length:
            try:
                record = decode_record(r.take(length))
            except RecordRefused as err:
                raise malformed(f"FIND_NODE record: {err}") from None
        r.done()
        return cls(target, record)


@dataclass(slots=True)
class FoundNodes:
    """FIND_NODE's answer: the signed records of at most MAX_FOUND nodes the
    answerer holds nearest the target (the PEERS layout, capped at k)."""
    records: list = field(default_factory=list)

    def encode(self) -> bytes:
        return PeerList([PeerEntry(r) for r in self.records[:MAX_FOUND]]).encode()

    @classmethod
    def decode(cls, payload: bytes) -> "FoundNodes":
        if len(payload) >= 2 and _U16.unpack_from(payload)[0] > MAX_FOUND:
            raise malformed(f"FIND_NODE answer names over {MAX_FOUND} nodes")
        return cls([entry.record for entry in PeerList.decode(payload).peers])


# op -> (request body type, response body type)
BODIES = {
    Op.PING: (Empty, Empty),
    Op.PEERS: (PeerList, PeerList),
    Op.STATS: (Empty, Stats),
    Op.STORE: (StoreRequest, Empty),
    Op.RETRIEVE: (RetrieveRequest, RetrieveResponse),
    Op.VERIFY: (VerifyRequest, Digest),
    Op.DELETE: (KeyOnly, Empty),
    Op.ROOT_PUT: (Record, Empty),
    Op.ROOT_GET: (Empty, Record),
    Op.LINK: (LinkBody, Empty),
    Op.DIAL_BACK: (DialBackRequest, DialBackResponse),
    Op.RESERVE: (Empty, Reservation),
    Op.RELAY_INCOMING: (Circuit, Empty),
    Op.PUNCH_CONNECT: (PunchConnect, PunchConnect),
    Op.PUNCH_SYNC: (PunchSync, Empty),
    Op.OBSERVED: (Empty, Observed),
    Op.FIND_NODE: (FindNode, FoundNodes),
}

# Ops whose messages may continue in DATA frames.
STREAMING_REQUESTS = frozenset({Op.STORE})
STREAMING_RESPONSES = frozenset({Op.RETRIEVE})


def decode_request(op: int, payload: bytes):
    try:
        request_type = BODIES[Op(op)][0]
    except (ValueError, KeyError):
        raise RemoteError(ErrorCode.UNKNOWN_OP, f"op {op} is unknown") from None
    return request_type.decode(payload)


def decode_response(op: int, payload: bytes):
    return BODIES[Op(op)][1].decode(payload)
