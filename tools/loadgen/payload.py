"""Object contents: random, incompressible, reproducible, and cheap.

A process draws one random buffer once (the BLAKE3 extendable output of its
seed: hundreds of MB/s, deterministic). An object is a 16-byte prefix that is
unique to it, then a slice of that buffer at a random offset. Nothing is
copied per object beyond the first DATA_CHUNK (the STORE request's inline
bytes); the rest streams as memoryview slices of the shared buffer, so a
128 MB STORE costs no 128 MB allocation. An object is remembered as
(key, node, size, offset, prefix): enough to rebuild its bytes, to check a
RETRIEVE (BLAKE3 of what came back = key) and a VERIFY digest.

Objects under 16 bytes have a shorter prefix (their whole content); the
process keeps those keys in `small_live` so two live objects never share one.
"""
import blake3

from flud.protocol.codec import DATA_CHUNK

PREFIX = 16
BUFFER_MAX = 256 << 20   # larger objects wrap around the buffer
SLACK = 1 << 20          # room for random offsets
PARALLEL_HASH = 16 << 20  # hash larger bodies with BLAKE3's threads
SMALL_TRIES = 64


class SegmentSource:
    """The wire's pull source over a few memoryview segments, zero-copy."""

    __slots__ = ("_segments", "remaining")

    def __init__(self, segments, remaining: int):
        self._segments = list(segments)
        self.remaining = remaining

    def read(self, n: int):
        segments = self._segments
        while segments and not len(segments[0]):
            segments.pop(0)
        if not segments:
            return b""
        head = segments[0]
        piece = head[:n]
        segments[0] = head[len(piece):]
        self.remaining -= len(piece)
        return piece

    def close(self) -> None:
        self._segments = []


class Payloads:
    def __init__(self, seed: bytes, largest: int):
        self.size = min(largest, BUFFER_MAX) + SLACK
        self._buffer = blake3.blake3(b"check_load buffer " + seed).digest(length=self.size)
        self._view = memoryview(self._buffer)
        self.small_live = set()

    def body(self, offset: int, length: int) -> list:
        """`length` bytes of the buffer from `offset`, wrapping around."""
        view, size = self._view, self.size
        if offset + length <= size:
            return [view[offset:offset + length]]
        out = []
        while length:
            take = min(length, size - offset)
            out.append(view[offset:offset + take])
            length -= take
            offset = 0
        return out

    def new_object(self, size: int, prefix: bytes, rng):
        """-> (key, size, offset, prefix) for a fresh object of `size` bytes.

        `prefix` is 16 bytes unique to this object; objects shorter than that
        take random bytes instead, re-drawn until the key is not live here.
        """
        if size < PREFIX:
            for _ in range(SMALL_TRIES):
                content = rng.randbytes(size)
                key = blake3.blake3(content).digest()
                if key not in self.small_live:
                    self.small_live.add(key)
                    return key, size, 0, content
            size = PREFIX  # every short content is taken: fall back to a unique one
        body_len = size - PREFIX
        span = self.size - body_len + 1 if body_len < self.size else self.size
        offset = int(rng.random() * span)
        hasher = blake3.blake3(prefix, max_threads=blake3.blake3.AUTO) \
            if size >= PARALLEL_HASH else blake3.blake3(prefix)
        for segment in self.body(offset, body_len):
            hasher.update(segment)
        return hasher.digest(), size, offset, prefix

    def store_parts(self, size: int, offset: int, prefix: bytes):
        """-> (inline head bytes, SegmentSource of the rest or None)."""
        body_len = size - len(prefix)
        segments = self.body(offset, body_len)
        first = DATA_CHUNK - len(prefix)
        head_piece = segments[0][:first]
        head = prefix + head_piece if body_len else prefix
        rest = body_len - len(head_piece)
        if rest <= 0:
            return head, None
        segments[0] = segments[0][len(head_piece):]
        return head, SegmentSource(segments, rest)

    def verify_digest(self, nonce: bytes, size: int, offset: int, prefix: bytes) -> bytes:
        """What a node must answer to VERIFY(nonce) over the whole object."""
        hasher = blake3.blake3(nonce)
        hasher.update(prefix)
        for segment in self.body(offset, size - len(prefix)):
            hasher.update(segment)
        return hasher.digest()

    def forget(self, key: bytes, size: int) -> None:
        if size < PREFIX:
            self.small_live.discard(key)
