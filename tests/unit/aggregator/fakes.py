"""Deterministic stand-ins for the coder, hash, placement and clock."""

from __future__ import annotations

import hashlib

NODE_COUNT = 20
NODES = [f"node{i:02d}" for i in range(NODE_COUNT)]


def blake2b_32(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def xor_encoder(k: int, n: int):
    """Systematic fake coder: the k blocks, then n-k distinct XOR parities."""
    def encode(blocks: list[bytes]) -> list[bytes]:
        assert len(blocks) == k
        length = len(blocks[0])
        xor_all = 0
        for block in blocks:
            xor_all ^= int.from_bytes(block, "big")
        parities = [(xor_all ^ int.from_bytes(bytes([j + 1]) * length, "big"))
                    .to_bytes(length, "big") for j in range(n - k)]
        return list(blocks) + parities
    return encode


def rendezvous_place(nodes: list[str] = NODES):
    """Highest-random-weight placement: stable and spread over `nodes`."""
    def place(bundle_id: bytes, count: int) -> list[str]:
        ranked = sorted(nodes,
                        key=lambda name: blake2b_32(bundle_id + name.encode()))
        return ranked[:count]
    return place


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def file_bytes(index: int, size: int) -> bytes:
    """Distinct, reproducible pseudo-ciphertext of `size` bytes."""
    seed = blake2b_32(index.to_bytes(8, "big"))
    return (seed * (size // len(seed) + 1))[:size]
