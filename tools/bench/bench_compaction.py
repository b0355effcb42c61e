"""What compaction costs a node per GB it gives back (issue 19).

    .venv/bin/python tools/bench/bench_compaction.py [--archive-mib 256] [--member-kib 256]
                                                     [--ratios 0.2,0.25,0.5] [--dir DIR]

For each garbage ratio t: a fresh durable store (fsync on, as a node runs it)
gets one owner's archive of --archive-mib of --member-kib members, sent as
tars of 32 MiB; just over t of the members are deleted, spread evenly (every
1/t-th), with automatic compaction held off; the archive's pages are dropped
from the page cache (a node's archive is cold: it was written long ago); then
ShareStore.compact() runs alone and is measured: CPU seconds of this process
(user + system: compaction is all the node does meanwhile, in one worker),
wall seconds, and bytes read and written at the block layer and through
system calls (/proc/self/io). Each figure is divided by the GB reclaimed.
A node runs compaction at storage.limits.COMPACT_GARBAGE_RATIO; the other
ratios show what the choice trades (docs/DESIGN.md, "Leases, trash and
compaction"). Takes ~20 s with the defaults.
"""
from __future__ import annotations

import argparse
import io
import os
import random
import resource
import shutil
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import blake3  # noqa: E402

from flud.storage import capacity as capacity_module  # noqa: E402
from flud.storage.disk import ShareStore  # noqa: E402
from flud.storage.limits import COMPACT_GARBAGE_RATIO, MIB  # noqa: E402

GB = 10 ** 9
OWNER = b"O" * 32
TAR_MIB = 32


def io_counters() -> dict:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fill(store: ShareStore, archive_mib: int, member_kib: int, rng: random.Random) -> list:
    keys, per_tar = [], TAR_MIB * 1024 // member_kib
    blob = rng.randbytes(member_kib * 1024 + 4096)
    count = archive_mib * 1024 // member_kib
    while len(keys) < count:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(min(per_tar, count - len(keys))):
                start = rng.randrange(4096)  # distinct members, no 256 MiB of randomness to make
                data = blob[start:start + member_kib * 1024 - 8] + len(keys).to_bytes(8, "big")
                key = blake3.blake3(data).digest()
                info = tarfile.TarInfo(key.hex())
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                keys.append(key)
        body = buf.getvalue()
        store.put(blake3.blake3(body).digest(), OWNER, body, kind="archive")
    return keys


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(directory: str, ratio: float, archive_mib: int, member_kib: int) -> dict:
    root = os.path.join(directory, f"store-{ratio}")
    store = ShareStore(root, 64 * 1024 * MIB, fsync=True)
    try:
        keys = fill(store, archive_mib, member_kib, random.Random(1))
        dead = int(len(keys) * ratio) + 1
        step = len(keys) / dead
        saved = capacity_module.COMPACT_GARBAGE_RATIO
        capacity_module.COMPACT_GARBAGE_RATIO = 1.0  # held off: compacted below, measured
        try:
            for i in range(dead):
                store.delete(keys[int(i * step)], OWNER)
        finally:
            capacity_module.COMPACT_GARBAGE_RATIO = saved
        before = store.stats()
        drop_cache(store._layout.archive_path(OWNER))
        io0, cpu0, wall0 = io_counters(), cpu_seconds(), time.perf_counter()
        reclaimed = store.compact(OWNER)
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
        io1 = io_counters()
        assert reclaimed == before["garbage_bytes"] and store.stats()["garbage_bytes"] == 0
        per_gb = GB / reclaimed
        return {"ratio": ratio, "archive_mb": before["bytes_stored"] / 1e6, "reclaimed_mb": reclaimed / 1e6,
                "cpu_s_per_gb": cpu * per_gb, "wall_s_per_gb": wall * per_gb,
                "disk_read_gb_per_gb": (io1["read_bytes"] - io0["read_bytes"]) / reclaimed,
                "disk_write_gb_per_gb": (io1["write_bytes"] - io0["write_bytes"]) / reclaimed,
                "syscall_rw_gb_per_gb": (io1["rchar"] - io0["rchar"] + io1["wchar"] - io0["wchar"]) / reclaimed,
                "copied_per_reclaimed": (before["bytes_stored"] - reclaimed) / reclaimed}
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive-mib", type=int, default=256)
    parser.add_argument("--member-kib", type=int, default=256)
    parser.add_argument("--ratios", default=f"{COMPACT_GARBAGE_RATIO},0.25,0.5")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="bench-compaction-")
    os.makedirs(directory, exist_ok=True)
    try:
        print(f"archive {args.archive_mib} MiB of {args.member_kib} KiB members; node threshold "
              f"{COMPACT_GARBAGE_RATIO}; figures per GB reclaimed")
        print(f"{'ratio':>5} {'reclaimed':>10} {'copied/reclaimed':>16} {'cpu s':>7} {'wall s':>7} "
              f"{'disk rd GB':>10} {'disk wr GB':>10} {'syscall r+w GB':>14}")
        for ratio in (float(r) for r in args.ratios.split(",")):
            m = measure(directory, ratio, args.archive_mib, args.member_kib)
            print(f"{m['ratio']:>5.2f} {m['reclaimed_mb']:>7.1f} MB {m['copied_per_reclaimed']:>16.2f} "
                  f"{m['cpu_s_per_gb']:>7.2f} {m['wall_s_per_gb']:>7.2f} {m['disk_read_gb_per_gb']:>10.2f} "
                  f"{m['disk_write_gb_per_gb']:>10.2f} {m['syscall_rw_gb_per_gb']:>14.2f}", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
