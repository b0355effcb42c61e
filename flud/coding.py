"""k-of-n erasure coding (zfec), systematic, with byte-range decoding.

Data (a segment or a sealed bundle) is split into k equal blocks, the last
zero padded; share i < k is block i itself, shares k..n-1 are zfec parity.
Any k shares rebuild the data.

zfec works byte by byte: byte j of every share depends only on byte j of the
k blocks. So the same range [a, b) taken from any k shares decodes to the
range [a, b) of every block, which is how a small file inside a bundle is
restored without fetching whole shares (see docs/DESIGN.md).

zfec is imported inside the functions that use it: a storage node never codes.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from flud import gf256
from flud.errors import BadCodingParameters, BadShares, NotEnoughShares

__all__ = [
    "SegmentCoder",
    "Piece",
    "locate",
    "MAX_SHARES",
    "BadCodingParameters",
    "BadShares",
    "NotEnoughShares",
]

MAX_SHARES = 256  # zfec works in GF(2^8)

Buffer = bytes | bytearray | memoryview


class Piece(NamedTuple):
    """Bytes [start, end) of primary block `block_index`."""

    block_index: int
    start: int
    end: int


def locate(offset: int, length: int, block_length: int) -> list[Piece]:
    """Where bytes [offset, offset+length) of the original data lie in the blocks.

    One piece per block touched, in order; a range can straddle blocks.
    """
    if offset < 0 or length < 0:
        raise ValueError(f"offset and length must be >= 0, got {offset}, {length}")
    if length == 0:
        return []
    if block_length <= 0:
        raise ValueError(f"cannot locate {length} bytes in blocks of {block_length} bytes")
    pieces = []
    position, stop = offset, offset + length
    while position < stop:
        block_index, start = divmod(position, block_length)
        end = min(block_length, start + (stop - position))
        pieces.append(Piece(block_index, start, end))
        position += end - start
    return pieces


class SegmentCoder:
    """A k-of-n systematic zfec code; holds no data, safe to share between threads."""

    def __init__(self, k: int, n: int):
        if not (isinstance(k, int) and isinstance(n, int)) or not 1 <= k <= n <= MAX_SHARES:
            raise BadCodingParameters(
                f"erasure code needs 1 <= k <= n <= {MAX_SHARES}, got k={k!r}, n={n!r}"
            )
        self.k = k
        self.n = n
        self._encoder = None
        self._decoder = None
        self._parity_coder = None

    def __repr__(self) -> str:
        return f"SegmentCoder(k={self.k}, n={self.n})"

    def block_length(self, data_length: int) -> int:
        """Length of every block and share for data of this length: ceil(len / k)."""
        return -(-data_length // self.k)

    # --- encoding -----------------------------------------------------------

    def encode(self, data: Buffer) -> tuple[int, list[memoryview]]:
        """Returns (block_length, n shares).

        Shares are read-only memoryviews: the primary ones are views into
        `data` (no copy, so do not change `data` while they are in use), only
        the zero-padded last block and the parity are new buffers. Use
        bytes(share) where a real bytes object is needed.
        """
        block_length, blocks = self.split(data)
        return block_length, blocks + self.parity(blocks)

    def split(self, data: Buffer) -> tuple[int, list[memoryview]]:
        """(block_length, the k primary shares): views of `data`, the last padded."""
        view = memoryview(data).cast("B").toreadonly()
        block_length = self.block_length(len(view))
        blocks = [view[i * block_length : (i + 1) * block_length] for i in range(self.k)]
        for i, block in enumerate(blocks):
            if len(block) < block_length:
                padded = bytearray(block_length)
                padded[: len(block)] = block
                blocks[i] = memoryview(padded).toreadonly()
        return block_length, blocks

    def parity(self, blocks: Sequence[Buffer], out: Sequence | None = None) -> list[memoryview]:
        """The n-k parity shares of the k primary ones (from split), coded
        into `out` (n-k writable buffers of at least a block each) where
        given, so a caller can use the same buffers for every segment."""
        if self.n == self.k:
            return []
        if gf256.available():
            # zfec's parity from flud's vector kernel (flud/gf256.py)
            coder = self._get_parity_coder()
            if out is None:
                parity = coder.encode(blocks)
            else:
                length = len(blocks[0])
                parity = [memoryview(o).cast("B")[:length] for o in out]
                coder.encode_into(blocks, parity)
        else:
            parity = self._get_encoder().encode(list(blocks), list(range(self.k, self.n)))
        return [memoryview(share).toreadonly() for share in parity]

    # --- decoding -----------------------------------------------------------

    def decode(self, shares: Mapping[int, Buffer], data_length: int) -> bytes:
        """The original data from any k of its shares (more are fine)."""
        block_length = self._check_shares(shares)
        if not 0 <= data_length <= self.k * block_length:
            raise BadShares(
                f"data of {data_length} bytes cannot come from {self.k} blocks of {block_length} bytes"
            )
        blocks = self.decode_blocks_range(shares)
        # Join only the bytes that are data, not the padding: one copy.
        parts = []
        remaining = data_length
        for block in blocks:
            take = min(block_length, remaining)
            parts.append(memoryview(block)[:take])
            remaining -= take
        return b"".join(parts)

    def decode_blocks_range(self, slices: Mapping[int, Buffer]) -> list[Buffer]:
        """The same range [a, b) of k primary blocks, from that range of any k shares.

        With every primary slice present nothing is decoded (systematic fast
        path) and the given objects are returned as they are.
        """
        self._check_shares(slices)
        if all(i in slices for i in range(self.k)):
            return [slices[i] for i in range(self.k)]
        # Prefer primaries: zfec passes them through and computes only the missing.
        chosen = sorted(slices)[: self.k]
        return self._get_decoder().decode([slices[i] for i in chosen], chosen)

    # --- re-coding (repair) --------------------------------------------------

    def recreate(self, shares: Mapping[int, Buffer], indexes: Sequence[int]) -> dict[int, Buffer]:
        """Shares `indexes` of an object, made again from any k of its shares.

        The code is deterministic, so each is byte for byte the share
        encode() made (the same BLAKE3 key): repair re-creates exactly what
        was lost and nothing that names a share changes. Only the asked
        indexes are coded: a lost primary comes out of the decode, a lost
        parity share from its own row of the parity kernel (zfec's encoder
        asked for that share alone where the kernel was not built). Works
        byte by byte like every other call here, so the same range of k
        shares gives that range of the lost ones (a long stream can be
        re-created a piece at a time).
        """
        self._check_shares(shares)
        wanted = sorted(set(indexes))
        outside = [i for i in wanted if not (isinstance(i, int) and 0 <= i < self.n)]
        if outside:
            raise BadShares(f"share numbers {outside} are outside 0..{self.n - 1}")
        made = {i: shares[i] for i in wanted if i in shares}
        to_code = [i for i in wanted if i not in shares]
        if not to_code:
            return made
        blocks = self.decode_blocks_range(shares)
        parity = []
        for i in to_code:
            if i < self.k:
                made[i] = blocks[i]
            else:
                parity.append(i)
        if parity:
            if gf256.available():
                coded = self._get_parity_coder().encode_rows(blocks, [i - self.k for i in parity])
            else:
                coded = self._get_encoder().encode(list(blocks), parity)
            made.update(zip(parity, coded))
        return made

    # --- helpers ------------------------------------------------------------

    def _check_shares(self, shares: Mapping[int, Buffer]) -> int:
        """Validates indices and lengths; returns the common share length."""
        bad = [i for i in shares if not (isinstance(i, int) and 0 <= i < self.n)]
        if bad:
            raise BadShares(f"share numbers {bad} are outside 0..{self.n - 1}")
        if len(shares) < self.k:
            raise NotEnoughShares(
                f"need {self.k} of {self.n} shares to decode, have {len(shares)} ({sorted(shares)})"
            )
        lengths = {len(share) for share in shares.values()}
        if len(lengths) != 1:
            raise BadShares(f"shares must all have the same length, got lengths {sorted(lengths)}")
        return lengths.pop()

    def _get_encoder(self):
        if self._encoder is None:
            import zfec

            self._encoder = zfec.Encoder(self.k, self.n)
        return self._encoder

    def _get_parity_coder(self):
        if self._parity_coder is None:
            self._parity_coder = gf256.ParityCoder(self.k, self.n)
        return self._parity_coder

    def _get_decoder(self):
        if self._decoder is None:
            import zfec

            self._decoder = zfec.Decoder(self.k, self.n)
        return self._decoder
