"""Content-defined chunking: where a large file's chunks end.

A chunk ends where a rolling hash of the last 64 bytes says so (a gear
hash with FastCDC's skip of a chunk's first bytes: flud/_cdc.c), so the cuts move with the
content: an insert, an append or a moved region changes the chunks it
touches and leaves the others as they were, and a backup stores only those
(client/backup/chunked.py). Sizes: at least AVERAGE / 2, about AVERAGE
(512 KiB) on average, at most 8 x AVERAGE (restic's are twice these).

The gear table comes from the user secret, so where the cuts fall (which a
node could see as the lengths of what a backup sends) says nothing that
another user's chunking of a known file could match.

The scan runs in C with the GIL released, over a stream: `cuts()` takes the
file a buffer at a time and carries its state over, so no chunk is ever
held whole. Where flud/_cdc.c was not built, chunks are cut at fixed sizes
(AVERAGE): files still back up and restore, but shifted data is stored again.
"""
try:
    from flud import _cdc
except ImportError:  # built without a C compiler: fixed-size chunks
    _cdc = None

# 512 KiB, half restic's: measured over 100 gear tables (scaled /16), 1 MiB
# inserted into 256 MiB made a median 1.61 MiB of new chunks (p90 2.38,
# p99 3.61) against 2.41 (p90 3.35, p99 4.00, 2% past the 4 MiB the issue
# allows) at 1 MiB. A chunk costs a row of the local index (~150 bytes),
# not a STORE: new chunks travel in full segments and extents whatever
# their size, so smaller chunks cost little and find more.
AVERAGE = 512 * 1024
PURPOSE_GEAR = "cdc-gear-v1"
WINDOW_BITS = 64


def available() -> bool:
    return _cdc is not None


class ChunkSizes:
    """min, normal (where the easier mask starts), max and the two masks
    (over the hash's top bits) for an average of `average` (a power of two).

    Past `min` (average / 2) the cut chance per byte is 2 / average: chunks
    are min plus an exponential tail, ~1.0x the average on random data
    (tests/unit/core/test_chunker.py). One mask, not FastCDC's two: measured
    over 100 secrets (gear tables) with 1/16 of an average inserted-into file
    (1 MiB into 256 MiB, scaled), the new bytes were a median 2.40 averages
    and past 4 in 4% of them; with a harder mask up to 3/4 of the average
    and an easier one after (sizes more even), 2.26 but past 4 in 9%, up to
    6.5: the tail is what the target (n/k x 4 MiB sent) meets or misses."""

    def __init__(self, average: int = AVERAGE):
        if average < 256 or average & (average - 1):
            raise ValueError(f"the average chunk size must be a power of two of at least 256 "
                             f"bytes, not {average}")
        bits = average.bit_length() - 1
        self.average = average
        self.min = average // 2
        self.normal = self.min
        self.max = average * 8
        self.mask_small = _top_bits(bits + 1)   # (no bytes between min and normal)
        self.mask_large = _top_bits(bits - 1)


def _top_bits(count: int) -> int:
    return ((1 << count) - 1) << (WINDOW_BITS - count)


class Chunker:
    """The cut points of one stream (a file), fed buffer after buffer."""

    def __init__(self, secret: bytes, sizes: ChunkSizes):
        self.sizes = sizes
        from flud.crypto import derive_key   # here: a client home reads AVERAGE alone
        self._gear = derive_key(secret, PURPOSE_GEAR, 256 * 8)
        self._args = (sizes.min, sizes.normal, sizes.max, sizes.mask_small, sizes.mask_large)
        self._pos = 0    # bytes of the current chunk seen so far
        self._hash = 0

    def cuts(self, data) -> list:
        """Offsets in `data` at which a chunk ends (after the byte before),
        given every byte of the stream before it in earlier calls."""
        view = memoryview(data).cast("B")
        out = []
        start, length = 0, len(view)
        if _cdc is None:
            return self._fixed_cuts(length)
        while start < length:
            used, cut, self._hash = _cdc.scan(view[start:], self._gear, self._pos, self._hash,
                                              *self._args)
            start += used
            if cut:
                out.append(start)
                self._pos = self._hash = 0
            else:
                self._pos += used
        return out

    def _fixed_cuts(self, length: int) -> list:
        out = []
        at = self.sizes.average - self._pos
        while at <= length:
            out.append(at)
            at += self.sizes.average
        self._pos = (self._pos + length) % self.sizes.average
        return out
