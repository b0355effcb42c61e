"""Micro-benchmark: small files per second through the aggregator.

Real coder (zfec) and hash (BLAKE3), default FlushPolicy, k=4 n=8, 20 fake
nodes; sealed tars are confirmed at once (no network). Measures the
aggregator's own cost: bundling, coding, hashing, tar building.

    .venv/bin/python tools/bench/bench_aggregator.py [--files N] [--size B]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import blake3
import zfec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from flud.aggregator.aggregator import Aggregator  # noqa: E402
from flud.aggregator.policy import FlushPolicy  # noqa: E402

DEFAULT_FILES = 10_000
DEFAULT_FILE_SIZE = 1024
K, N = 4, 8
NODE_COUNT = 20
NODES = [f"node{i:02d}" for i in range(NODE_COUNT)]


def zfec_encoder(k: int, n: int):
    encoder = zfec.Encoder(k, n)
    parity_ids = list(range(k, n))

    def encode(blocks: list[bytes]) -> list[bytes]:
        # zfec returns only the requested (parity) blocks: prepend the
        # primaries to get all n shares, systematic.
        return list(blocks) + list(encoder.encode(blocks, parity_ids))
    return encode


def blake3_256(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def place(bundle_id: bytes, count: int) -> list[str]:
    return sorted(NODES, key=lambda name: blake3_256(bundle_id + name.encode()))[:count]


def run(files: int, size: int) -> tuple[float, dict]:
    aggregator = Aggregator(FlushPolicy(), K, N, zfec_encoder(K, N), blake3_256,
                            place, time.monotonic)
    # Distinct payloads: repeated ones would make identical bundles, whose
    # shares are stored once per tar, and flatter the figure.
    random_bytes = os.urandom(files * size)
    payloads = [random_bytes[i * size:(i + 1) * size] for i in range(files)]
    started = time.perf_counter()
    for i in range(files):
        while aggregator.must_drain():
            for tar in aggregator.take_sealed():
                aggregator.confirm(tar)
        aggregator.add(i, payloads[i])
    aggregator.flush()
    for tar in aggregator.take_sealed():
        aggregator.confirm(tar)
    aggregator.take_bundles()
    return time.perf_counter() - started, aggregator.stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--size", type=int, default=DEFAULT_FILE_SIZE)
    args = parser.parse_args()
    elapsed, stats = run(args.files, args.size)
    rate = args.files / elapsed
    print(f"aggregator: {rate:,.0f} files/s, {1e6 * elapsed / args.files:.1f} "
          f"µs per file ({args.files} files of {args.size} B, k={K} n={N}, "
          f"{stats['bundles']} bundles, {stats['tars_sealed']} tars, "
          f"{stats['bytes_out'] / 2**20:.1f} MiB out)")


if __name__ == "__main__":
    main()
