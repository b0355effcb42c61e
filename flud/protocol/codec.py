"""Framing: bytes <-> frames, with every limit enforced. Pure; no I/O.

See docs/protocol.md section 2 for the layout.
"""
import collections
import enum
import struct
from dataclasses import dataclass

from flud.protocol.errors import ErrorCode, FrameError

HEADER = struct.Struct(">IBBBBI")
HEADER_SIZE = HEADER.size  # 12

MAX_FRAME_PAYLOAD = 4 * 1024 * 1024 + 4096
DATA_CHUNK = 1024 * 1024

FLAG_END = 0x01


class FrameType(enum.IntEnum):
    HELLO = 0
    REQUEST = 1
    RESPONSE = 2
    ERROR = 3
    DATA = 4
    CANCEL = 5


class Op(enum.IntEnum):
    NONE = 0
    PING = 1
    PEERS = 2
    STATS = 3
    STORE = 10
    RETRIEVE = 11
    VERIFY = 12
    DELETE = 13
    ROOT_PUT = 20
    ROOT_GET = 21
    LINK = 60       # a client-node link record (docs/quotas.md)
    DIAL_BACK = 50   # reachability: dial me back at the address you see (docs/reachability.md)
    RESERVE = 51     # relay: hold a reservation for me (docs/reachability.md, "Relay")
    RELAY_INCOMING = 52  # relay -> reserved node: someone waits on circuit TOKEN
    PUNCH_CONNECT = 53   # hole punch: here are my addresses, yours? (docs/reachability.md)
    PUNCH_SYNC = 54      # hole punch: dial me now (the asker dials half a round trip later)
    OBSERVED = 55        # where do you see me? (a client learns its outside address to punch)
    FIND_NODE = 40


_FRAME_TYPES = frozenset(int(t) for t in FrameType)


class Pieces:
    """A DATA payload as the pieces it arrived in (views, no copies).

    Joining would cost a fresh buffer per frame: with large allocations
    mapped afresh each time (flud.lean pins malloc's mmap threshold), a joined
    1 MiB frame costs 256 page faults and a copy before it is copied again
    into a file or a preallocated answer. Consumers walk the pieces instead
    (pieces_of); bytes(p) joins when a caller really needs one buffer.
    """

    __slots__ = ("parts", "length")

    def __init__(self, parts, length: int):
        self.parts = parts
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        return iter(self.parts)

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __eq__(self, other):
        if isinstance(other, (bytes, bytearray, memoryview, Pieces)):
            return bytes(self) == bytes(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"Pieces({len(self.parts)} parts, {self.length} bytes)"


class Placed:
    """A DATA payload its receiver put in place itself, as it arrived
    (FrameParser.divert): only its length is left to pass on."""

    __slots__ = ("length",)

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Placed({self.length} bytes)"


def pieces_of(payload) -> tuple | list:
    """The buffers of a payload, in order: a Pieces' parts or the one buffer."""
    return payload.parts if type(payload) is Pieces else (payload,)


@dataclass(slots=True)
class Frame:
    type: int
    op: int
    flags: int
    request_id: int
    payload: bytes  # DATA frames: a buffer or Pieces

    @property
    def end(self) -> bool:
        return bool(self.flags & FLAG_END)


def frame_header(frame_type: int, op: int, flags: int, request_id: int,
                 payload_length: int) -> bytes:
    if payload_length > MAX_FRAME_PAYLOAD:
        raise FrameError(ErrorCode.TOO_LARGE,
                         f"frame payload of {payload_length} bytes is over "
                         f"the limit of {MAX_FRAME_PAYLOAD}")
    return HEADER.pack(payload_length, frame_type, op, flags, 0, request_id)


class FrameParser:
    """Accumulates bytes and yields whole frames.

    Incoming chunks are kept as they came (TLS hands over 16 KiB records),
    never joined into one stream. A header or a message body is taken as one
    buffer (joined only when it spans chunks: bodies are small). A DATA
    payload is never joined here: it is handed on as views of the chunks it
    arrived in (one memoryview, or Pieces), and its consumer copies it once,
    into a file or into the answer's buffer. A receiver with a buffer waiting
    for a DATA payload may instead take it over as it arrives (data_due,
    divert, placed) and decrypt it straight into place: no copy at all.

    A bad header raises FrameError; the connection must then be closed,
    because the stream can't be trusted.
    """

    def __init__(self, max_payload: int = MAX_FRAME_PAYLOAD):
        self._chunks = collections.deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._size = 0    # unconsumed bytes held
        self._max_payload = max_payload
        self._header = None
        self._diverted = 0  # bytes of a diverted payload still to be placed

    @property
    def buffered(self) -> int:
        return self._size

    def feed(self, data) -> list:
        if self._diverted:
            raise RuntimeError("bytes fed while a diverted payload is still arriving")
        if data:
            self._chunks.append(bytes(data))
            self._size += len(data)
        frames = []
        while True:
            header = self._header
            if header is None:
                if self._size < HEADER_SIZE:
                    break
                header = HEADER.unpack(self._take(HEADER_SIZE))
                self._check_header(header)
                self._header = header
            length = header[0]
            if self._size < length:
                break
            if not length:
                payload = b""
            elif header[1] == FrameType.DATA:
                payload = self._take_pieces(length)
            else:
                payload = self._take(length)
            self._header = None
            frames.append(Frame(header[1], header[2], header[3], header[5],
                                payload))
        return frames

    def data_due(self):
        """(request_id, payload length, bytes of it buffered) while the payload
        of a DATA frame is arriving (its header read, the payload not yet
        whole); None otherwise."""
        header = self._header
        if header is None or header[1] != FrameType.DATA or self._size >= header[0]:
            return None
        return header[5], header[0], self._size

    def divert(self) -> list:
        """Hand the payload that data_due() announced to the caller: returns
        the parts of it buffered so far, and the caller puts the rest in place
        itself (a TLS read straight into the buffer the payload is for,
        instead of a fresh bytes object per record and a copy), reporting
        each piece with placed(). feed() is refused until it is whole."""
        if self.data_due() is None:
            raise RuntimeError("no DATA payload is arriving")
        parts = self._take_parts(self._size) if self._size else []
        self._diverted = self._header[0] - sum(map(len, parts))
        return parts

    def placed(self, n: int) -> list:
        """n more bytes of the diverted payload are in place; once it is whole,
        its frame, with a Placed payload."""
        if not 0 < n <= self._diverted:
            raise RuntimeError(f"placed {n} bytes with {self._diverted} to go")
        self._diverted -= n
        if self._diverted:
            return []
        header, self._header = self._header, None
        return [Frame(header[1], header[2], header[3], header[5], Placed(header[0]))]

    def _take(self, n: int) -> bytes:
        """n bytes in one buffer (headers and message bodies are decoded whole)."""
        parts = self._take_parts(n)
        if len(parts) == 1:
            return parts[0] if type(parts[0]) is bytes else bytes(parts[0])
        return b"".join(parts)

    def _take_pieces(self, n: int):
        """n bytes as views of the chunks they arrived in (one view: as it is)."""
        parts = self._take_parts(n)
        return parts[0] if len(parts) == 1 else Pieces(parts, n)

    def _take_parts(self, n: int) -> list:
        self._size -= n
        parts = []
        chunks = self._chunks
        while n:
            first = chunks[0]
            start = self._offset
            available = len(first) - start
            if available > n:
                parts.append(memoryview(first)[start:start + n])
                self._offset = start + n
                break
            parts.append(memoryview(first)[start:] if start else first)
            chunks.popleft()
            self._offset = 0
            n -= available
        return parts

    def _check_header(self, header) -> None:
        length, frame_type, op, flags, reserved, _ = header
        if length > self._max_payload:
            raise FrameError(ErrorCode.TOO_LARGE,
                             f"frame of {length} bytes is over the limit "
                             f"of {self._max_payload}")
        if frame_type not in _FRAME_TYPES:
            raise FrameError(ErrorCode.MALFORMED,
                             f"unknown frame type {frame_type}")
        if reserved or flags & ~FLAG_END:
            raise FrameError(ErrorCode.MALFORMED,
                             "reserved header bits are set")
