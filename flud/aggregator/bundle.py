"""The open bundle, and coding a sealed bundle into n keyed shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable

from flud.aggregator.records import FileSlice

Encode = Callable[[list[bytes]], list[bytes]]
Hash = Callable[[bytes], bytes]

KEY_LENGTH = 32
# A bundle of empty files still has one byte per block, so every share is a
# real, hashable, storable member.
MIN_BLOCK_LENGTH = 1


class OpenBundle:
    """Ciphertexts appended back to back, with where each one landed."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._files: list[FileSlice] = []

    @property
    def size(self) -> int:
        return len(self._buffer)

    @property
    def file_count(self) -> int:
        return len(self._files)

    def append(self, file_id: Hashable, ciphertext: bytes) -> FileSlice:
        placed = FileSlice(file_id, len(self._buffer), len(ciphertext))
        self._buffer += ciphertext
        self._files.append(placed)
        return placed

    def take(self) -> tuple[bytearray, list[FileSlice]]:
        """Return the bundle's bytes and files, and start a new bundle.

        The buffer itself is handed over (no copy): the caller owns it."""
        data, files = self._buffer, self._files
        self._buffer, self._files = bytearray(), []
        return data, files


@dataclass(frozen=True)
class CodedBundle:
    bundle_id: bytes
    length: int
    block_length: int
    shares: list[bytes]
    keys: list[bytes]


def code_bundle(data: bytes, k: int, n: int, encode: Encode,
                hash: Hash) -> CodedBundle:
    """Split `data` into k zero-padded blocks, code them into n shares.

    The blocks are views of `data` (only a block that needs zero padding is
    copied): coding a bundle adds its n - k parity shares to memory, not
    another two copies of the bundle. The shares are only valid while `data`
    is not changed."""
    block_length = max(MIN_BLOCK_LENGTH, -(-len(data) // k))
    view = memoryview(data).toreadonly()
    blocks = []
    for i in range(k):
        block = view[i * block_length:(i + 1) * block_length]
        if len(block) < block_length:
            padded = bytearray(block_length)
            padded[:len(block)] = block
            block = memoryview(padded).toreadonly()
        blocks.append(block)
    shares = list(encode(blocks))
    _check_shares(shares, blocks, n, block_length)
    bundle_id = _checked_key(hash(data), "bundle")
    keys = [_checked_key(hash(share), f"share {i}")
            for i, share in enumerate(shares)]
    return CodedBundle(bundle_id, len(data), block_length, shares, keys)


def _check_shares(shares: list[bytes], blocks: list[bytes], n: int,
                  block_length: int) -> None:
    # Restore reads a file's bytes straight from the primary shares, so a
    # non-systematic coder would silently corrupt every restore: refuse it.
    if len(shares) != n:
        raise ValueError(f"encode() returned {len(shares)} shares, "
                         f"expected n={n}")
    for i, share in enumerate(shares):
        if len(share) != block_length:
            raise ValueError(f"encode() returned share {i} of {len(share)} "
                             f"bytes, expected {block_length}")
    for i, block in enumerate(blocks):
        if shares[i] is not block and shares[i] != block:
            raise ValueError(f"encode() is not systematic: share {i} differs "
                             f"from block {i}; return the k blocks followed "
                             f"by the n-k parity shares")


def _checked_key(key: bytes, what: str) -> bytes:
    if len(key) != KEY_LENGTH:
        raise ValueError(f"hash() of the {what} returned {len(key)} bytes, "
                         f"expected {KEY_LENGTH}")
    return bytes(key)
