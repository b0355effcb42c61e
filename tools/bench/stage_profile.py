#!/usr/bin/env python3
"""Where a flud client command's CPU goes, stage by stage (issue 27).

    python tools/bench/stage_profile.py OUT.json -- backup TREE --home H
    python tools/bench/stage_profile.py --limit TREE [TREE ...]   (this machine's floor)

The command runs in this process, as `python -m flud ...` would run it (as
count_client.py does), with a sampling thread beside it: every SAMPLE_S it
reads how much CPU each thread of the process used since the last sample
(/proc/self/task/TID/schedstat: nanoseconds on a CPU, not ticks) and gives
that time to the stage the thread's Python stack is in at that moment
(STAGES: the innermost frame that names one wins). Work in C with the GIL
let go (zstd, hashlib, OpenSSL, zfec, BLAKE3) shows under the Python frame
that called it; the kernel's time (stat, open, read, TLS sockets) under the
frame that made the call. Nothing in flud is changed or slowed: the
production code has no counters; the sampler's own CPU (about 1%) is its
own line ("profiler") and left out of the shares. A stage is a statistical
figure: a run of a few seconds has a few thousand samples.

--limit: this machine's physical floor for backing up TREE: the single-core
CPU a byte costs to read, hash (SHA-256 of a small file, BLAKE3 of every
share), compress (zstd level 1), encrypt (AES-256-CTR) and code (k-of-n
parity) -- measured on a sample of the tree's files, scaled to all its bytes
-- summed, and divided by the cores: no client could back the tree up in
less wall time than that on this machine (walking, per-file work, TLS and
the nodes come on top).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:   # the interpreter's own flud (a venv's editable install: its worktree's code)
    import flud  # noqa: F401
except ImportError:
    sys.path.insert(0, ROOT)

SAMPLE_S = 0.01

# (stage, path fragments of a frame's file, function names or None for any).
# Looked up from the innermost frame outwards: the first frame that matches
# names the stage. Order matters within one frame only.
STAGES = [
    ("hash", ("/hashlib.py", "/hmac.py"), None),
    ("hash", ("flud/crypto.py",), {"content_digest", "convergent_key", "file_convergence",
                                   "segment_convergence", "segment_key"}),
    ("encrypt", ("flud/crypto.py", "flud/libcrypto.py"), None),
    ("compress", ("flud/compression.py", "/compression/zstd", "/zstd/"), None),
    ("chunk", ("flud/chunker.py", "chunk_ids.py", "backup/chunked.py"), None),
    ("code", ("flud/coding.py", "flud/gf256.py", "aggregator/bundle.py"), None),
    ("code", ("repository/bundle_sender.py",), {"encode"}),
    ("TLS/transfer", ("flud/protocol/", "twisted/internet/", "twisted/protocols/"), None),
    ("records", ("repository/blobs.py", "repository/tree_records.py", "backup/tree_builder.py",
                 "backup/tree_writer.py", "backup/meta_reading.py", "repository/entry_meta.py",
                 "repository/record_cache.py", "repository/record_format.py",
                 "repository/holder_map.py", "repository/head.py", "client/records.py",
                 "restore/meta_restore.py"), None),
    ("read/write files", ("backup/file_reading.py", "client/directio.py", "client/sparse.py",
                          "restore/file_writer.py", "restore/block_writer.py",
                          "restore/destdir.py", "backup/large_files.py",
                          "repository/segments.py", "repository/extents.py"), None),
    ("index (sqlite)", ("client/index.py", "client/run_rows.py", "repository/reader.py"), None),
    ("tar/bundle", ("flud/aggregator/",), None),
    ("walk", ("backup/source_walk.py", "backup/source_scan.py", "backup/listing.py",
              "backup/source_excludes.py", "client/pathmatch.py", "/pathspec/"), None),
    ("small-file pipeline", ("backup/small_files.py", "repository/bundle_sender.py",
                             "repository/small_contents.py", "restore/small_runs.py",
                             "restore/small_fetch.py", "repository/bundle_ranges.py"), None),
    ("tree walk/restore", ("restore/", "repository/tree_walk.py"), None),
    ("memory accounting", ("flud/memory.py", "client/budget_plan.py"), None),
    ("start-up (imports)", ("<frozen importlib", "flud/lean.py"), None),
    ("backup walk/classify", ("backup/backup_job.py",), None),
    ("reactor, deferreds", ("twisted/",), None),
]
ORDER = ["walk", "backup walk/classify", "read/write files", "hash", "chunk", "compress",
         "encrypt", "code", "tar/bundle", "small-file pipeline", "records", "index (sqlite)",
         "TLS/transfer", "tree walk/restore", "memory accounting", "reactor, deferreds",
         "start-up (imports)", "other"]


def _stage_of(frame, cache) -> str:
    while frame is not None:
        code = frame.f_code
        stage = cache.get(code)
        if stage is None:
            stage = ""
            name = code.co_filename
            for label, fragments, functions in STAGES:
                if any(f in name for f in fragments) and (functions is None
                                                          or code.co_name in functions):
                    stage = label
                    break
            cache[code] = stage
        if stage:
            return stage
        frame = frame.f_back
    return "other"


def _run_ns(tid: int):
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class StageSampler:
    """Samples every thread of this process (see the module's doc)."""

    def __init__(self, period: float = SAMPLE_S):
        self.period = period
        self.seconds = {}
        self.threads = {}   # thread name -> {stage: seconds}
        self.samples = 0
        self._last = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stage-sampler", daemon=True)
        self._cache = {}

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.seconds

    def _loop(self):
        me = threading.get_native_id()
        self._me = me
        while not self._stop.wait(self.period):
            self._sample()

    def _sample(self):
        frames = sys._current_frames()
        threads = {t.ident: t for t in threading.enumerate()}
        for ident, frame in frames.items():
            thread = threads.get(ident)
            if thread is None:
                continue
            tid = thread.native_id
            ran = _run_ns(tid)
            if ran is None:
                continue
            delta = ran - self._last.get(tid, 0 if tid != threading.main_thread().native_id
                                         else ran)
            self._last[tid] = ran
            if delta <= 0:
                continue
            stage = "profiler" if tid == getattr(self, "_me", None) else \
                _stage_of(frame, self._cache)
            self.seconds[stage] = self.seconds.get(stage, 0.0) + delta / 1e9
            # pool threads by their pool's name, not their number
            name = thread.name.rstrip("0123456789").rstrip("-")
            mine = self.threads.setdefault(name, {})
            mine[stage] = mine.get(stage, 0.0) + delta / 1e9
        self.samples += 1
        del frames


def profiled(argv: list, out_path: str) -> int:
    from flud.cli.main import main
    # the main thread's CPU before the command (this module's imports) is not the command's
    sampler = StageSampler()
    sampler._last[threading.main_thread().native_id] = _run_ns(threading.get_native_id()) or 0
    started = time.monotonic()
    cpu0 = os.times()
    sampler.start()
    code = 1
    try:
        code = main(argv)
    finally:
        seconds = sampler.stop()
        cpu1 = os.times()
        with open(out_path, "w") as f:
            json.dump({"argv": argv, "wall": time.monotonic() - started,
                       "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                       "samples": sampler.samples,
                       "stages": {k: round(v, 4) for k, v in sorted(seconds.items())},
                       "threads": {t: {k: round(v, 4) for k, v in sorted(s.items())}
                                   for t, s in sampler.threads.items()}}, f)
    return code


def split_text(stages: dict) -> str:
    """'walk 1.2 s (8%), hash ...' in ORDER, the profiler's own line left out."""
    total = sum(v for k, v in stages.items() if k != "profiler") or 1.0
    parts = [f"{k} {stages[k]:.2f} s ({100 * stages[k] / total:.0f}%)"
             for k in ORDER if stages.get(k, 0) >= 0.005]
    return ", ".join(parts)


# ----------------------------------------------------------------- the floor

def _sample_files(trees, every: int, most: int):
    """Every `every`th regular file of the trees, up to `most` bytes; and the
    trees' total bytes and files."""
    picked, got, total, files, i = [], 0, 0, 0, 0
    for tree in trees:
        for dirpath, _, names in os.walk(tree):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not (st.st_mode & 0o170000 == 0o100000):
                    continue
                total += st.st_size
                files += 1
                i += 1
                if i % every == 0 and got < most:
                    picked.append((path, st.st_size))
                    got += st.st_size
    return picked, total, files


def floor(trees, k: int = 4, n: int = 8, every: int = 8, most: int = 96 << 20,
          small_limit: int = 1 << 20, cores: int | None = None) -> dict:
    """The single-core CPU seconds each byte-bound stage costs for the
    trees' bytes (measured on a sample, scaled), their sum, and the sum
    over the cores: the least wall time a backup can take here."""
    import hashlib

    import blake3

    from flud.coding import SegmentCoder
    from flud.compression import compress_if_worth
    from flud.crypto import crypt_ctr_in_place

    cores = cores or os.cpu_count() or 1
    picked, total, nfiles = _sample_files(trees, every, most)
    coder = SegmentCoder(k, n)
    key = bytes(32)
    t = {"read": 0.0, "hash": 0.0, "compress": 0.0, "encrypt": 0.0, "code": 0.0}
    sampled = stored = 0
    clock = time.thread_time
    for path, size in picked:
        c0 = clock()
        try:
            data = bytearray(size)
            with open(path, "rb", buffering=0) as f:
                del data[f.readinto(data):]
        except OSError:
            continue
        c1 = clock()
        digest = (hashlib.sha256(data) if len(data) < small_limit else blake3.blake3(data))
        digest.digest()
        c2 = clock()
        _, out = compress_if_worth(data)
        out = bytearray(out)
        c3 = clock()
        crypt_ctr_in_place(key, out)
        c4 = clock()
        # the shares: k views and n-k parity blocks, each hashed (its key)
        for start in range(0, len(out), 2 << 20):
            piece = out[start:start + (2 << 20)]
            if not piece:
                continue
            for share in coder.encode(piece)[1]:
                blake3.blake3(share).digest()
        c5 = clock()
        t["read"] += c1 - c0
        t["hash"] += c2 - c1
        t["compress"] += c3 - c2
        t["encrypt"] += c4 - c3
        t["code"] += c5 - c4
        sampled += len(data)
        stored += len(out)
    scale = total / sampled if sampled else 0.0
    scaled = {stage: v * scale for stage, v in t.items()}
    one_core = sum(scaled.values())
    return {"bytes": total, "files": nfiles, "sampled_bytes": sampled,
            "stored_fraction": stored / sampled if sampled else None, "cores": cores,
            "stages": {k: round(v, 3) for k, v in scaled.items()},
            "one_core_s": round(one_core, 3), "floor_s": round(one_core / cores, 3)}


def floor_text(f: dict) -> str:
    parts = ", ".join(f"{k} {v:.2f}" for k, v in f["stages"].items())
    return (f"{f['one_core_s']:.2f} s on one core ({parts}; sampled "
            f"{f['sampled_bytes'] / 1e6:.0f} of {f['bytes'] / 1e6:.0f} MB) / {f['cores']} "
            f"cores = {f['floor_s']:.2f} s")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--limit":
        print(json.dumps(floor(sys.argv[2:]), indent=1))
        sys.exit(0)
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(profiled(sys.argv[3:], sys.argv[1]))
