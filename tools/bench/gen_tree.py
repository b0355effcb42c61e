#!/usr/bin/env python3
"""A generated home directory with projects: deterministic, streamed, realistic to a compressor.

    python tools/bench/gen_tree.py DIR [--files N] [--bytes B] [--seed S]
    python tools/bench/gen_tree.py DIR --seed S --mutate DAY   (one simulated day of changes)

The same seed gives the same names, bytes, modes, mtimes and symlinks (mtimes are spread
over the six years before a fixed date, not before today). Default: 50,000 files and
1 GB; --bytes defaults to 20 kB a file (1 GB at 50,000 files, 6 GB at 300,000).

Shape, by share of files: projects ~80% (source trees with docs, tests, scripts,
.git-like object stores with read-only objects, build output, and node_modules-like or
site-packages-like trees of many tiny files, some packages vendored twice), Documents
~8%, dotfiles (.config, .cache, .local, .ssh) ~8.5%, Pictures, Downloads (archives and
duplicates of documents), and a few large media files that take what is left of the
byte budget (15-30% of it, by seed). Sizes are log-normal per class (median of all files
~3 KiB, ~85% under 16 KiB, a long tail to tens of MB); some files are empty, some
directories empty, some symlinks (relative, inside the tree), LICENSE files, git hooks
and vendored packages are identical copies; modes 0644, 0755 (scripts, hooks, shared
objects), 0600 (keys, private notes), 0444 (git objects).

Compression ratios measured on this generator's output, per file as a backup tool would
compress (zstd level 3 / zlib level 6; tree_content.py says how they come about):
  source code (py, js, c, go, rs, java, sh): 3 kB files 2.9-3.1x / 3.0-3.2x,
      30 kB 4.3-4.8x / 4.5-5.1x, 1-4 MB 3.3-4.0x / 2.8-3.3x
  prose (md, txt): 3 kB 2.2x / 2.2-2.3x, 30 kB 2.8-2.9x / 2.9x, 1-4 MB 2.4x / 2.3x
  data: JSON 4.0-5.5x / 4.4-6.0x, CSV 2.4-3.3x / 2.4-3.1x, logs 2.6-3.4x / 2.7-3.5x,
      config 3.7-5.3x / 3.0-5.7x, HTML/XML 2.6-3.6x / 2.7-3.8x
  small binaries (object-like): 1.6-2.0x / 1.7-1.9x
  compressed (gz, zip, png, jpg, pdf, docx, git objects) and media: 1.00x
The default tree (seed 1: 50,003 files, 1,000 MB) is by bytes 43% text (3.5x with zstd-3),
16% binaries (1.67x), 15% compressed files and 25% media: ~1.6x as a whole; median file
3.2 kB, 85% under 16 KiB. The summary printed at the end estimates each kind's ratio from
a sample of the files.

Memory: the content pools (a few MB), one file's bytes and small counters; media are
written in 4 MiB chunks. mutate() walks the tree once, one directory at a time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_content  # noqa: E402
from tree_content import ANCHOR, Pools, content, kind_of_ext, pools_for, write_media  # noqa: E402
from tree_layout import Full, generate_layout  # noqa: E402
from tree_mutate import mutate  # noqa: E402,F401  (re-exported: gen_tree.mutate)

YEAR = 365 * 86400
BYTES_PER_FILE = 20_000
VERSION = 1  # bumped whenever a seed's tree changes: kept trees of another version are remade
DEFAULT_FILES = 50_000

# Size classes: (median bytes at 20 kB a file, log-normal sigma, cap).
SIZE_CLASSES = {
    "tiny": (1400, 1.2, 1 << 20), "source": (4800, 1.35, 4 << 20), "doc": (7200, 1.5, 8 << 20),
    "data": (14000, 2.0, 32 << 20), "object": (18000, 1.5, 16 << 20),
    "gitobj": (450, 1.2, 1 << 20), "archive": (10000, 1.6, 48 << 20),
    "photo": (200_000, 0.6, 12 << 20),
}
PRIVATE_DIRS = {".ssh", "private", ".gnupg"}


def _compressor():
    try:
        import zstandard
        level3 = zstandard.ZstdCompressor(level=3)
        return "zstd-3", level3.compress
    except ImportError:
        return "zlib-6", lambda data: zlib.compress(data, 6)


class TreeWriter:
    """Writes files, directories and symlinks under root and counts what it wrote."""

    SAMPLE_EVERY = 8
    SAMPLE_MAX = 256 << 10

    def __init__(self, root: str, seed: int, files: int, nbytes: int, pools: Pools | None = None):
        self.root = os.path.abspath(root)
        self.seed = seed
        self.target_files = files
        self.target_bytes = nbytes
        self.scale = nbytes / files / BYTES_PER_FILE
        self.pools = pools or pools_for(seed)
        self.rng = random.Random(f"tree:{seed}")
        self.limit = files
        self.files = self.bytes = self.symlinks = self.empty_files = 0
        self.executables = self.duplicates = 0
        self.kinds: dict = {}  # kind -> [files, bytes]
        self.sampled: dict = {}  # kind -> [raw bytes, compressed bytes]
        self.reservoir: list = []  # (name, kind, ext, size, cseed): candidates for copies
        self.npm_seen: list = []  # package seeds: a later copy of one is a vendored duplicate
        self.py_seen: list = []
        self.compressor_name, self._compress = _compressor()

    # ------------------------------------------------------------- sizes, names, times
    def size(self, cls: str, rng: random.Random) -> int:
        median, sigma, cap = SIZE_CLASSES[cls]
        return min(cap, int(rng.lognormvariate(math.log(median * self.scale), sigma)))

    def word(self, rng: random.Random) -> str:
        return rng.choice(self.pools.vocab.content[:1200])

    def ident(self, rng: random.Random) -> str:
        return self.pools.vocab.ident(rng)

    @staticmethod
    def span(rng: random.Random) -> tuple:
        """A unit's active years: its files' mtimes fall inside."""
        start = ANCHOR - rng.uniform(30 * 86400, 6 * YEAR)
        end = start + rng.uniform(86400, min(ANCHOR - start, 3 * YEAR))
        return start, end

    @staticmethod
    def mtime(rng: random.Random, span: tuple) -> int:
        return int(rng.uniform(*span)) * 1_000_000_000 + rng.randrange(1_000_000_000)

    # ------------------------------------------------------------------------ writes
    def file(self, rel: str, rng: random.Random, cls: str | None, span: tuple, mode: int = 0o644,
             kind: str | None = None, size: int | None = None, cseed: int | None = None,
             keep: bool = False) -> bool:
        """One regular file; its size and content seed come from rng unless given."""
        if self.files >= self.limit:
            raise Full
        ext = os.path.splitext(rel)[1]
        kind = kind or kind_of_ext(ext)
        if size is None:
            size = self.size(cls, rng) if cls else 0
        if cseed is None:
            cseed = rng.getrandbits(64)
        mtime = self.mtime(rng, span)
        data = content(self.pools, kind, ext, size, cseed)
        if not self._write(rel, data, mode, mtime):
            return False
        self._count(kind, data, mode)
        if keep and len(self.reservoir) < 512:
            self.reservoir.append((os.path.basename(rel), kind, ext, size, cseed))
        elif keep and rng.random() < 0.1:
            self.reservoir[rng.randrange(512)] = (os.path.basename(rel), kind, ext, size, cseed)
        return True

    def copy_of(self, folder: str, rng: random.Random, span: tuple, rename: bool = True) -> bool:
        """A copy of an earlier file (same bytes) in another place."""
        if not self.reservoir:
            return False
        name, kind, ext, size, cseed = rng.choice(self.reservoir)
        if rename and rng.random() < 0.5:
            name = f"{os.path.splitext(name)[0]} ({rng.randint(1, 3)}){ext}"
        if self.file(f"{folder}/{name}", rng, None, span, kind=kind, size=size, cseed=cseed):
            self.duplicates += 1
            return True
        return False

    def media(self, rel: str, rng: random.Random, size: int, span: tuple) -> None:
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_media(path, size, rng.getrandbits(64), os.path.splitext(rel)[1])
        os.chmod(path, 0o644)
        mtime = self.mtime(rng, span)
        os.utime(path, ns=(mtime, mtime))
        self.files += 1
        self.bytes += size
        entry = self.kinds.setdefault("media", [0, 0])
        entry[0] += 1
        entry[1] += size
        with open(path, "rb") as f:  # media are random: a 1 MiB sample is plenty
            self._sample("media", f.read(1 << 20))

    def symlink(self, rel: str, target: str) -> None:
        path = os.path.join(self.root, rel)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(target, path)
        except (FileExistsError, NotADirectoryError):
            return
        mtime = self.mtime(random.Random(f"link:{self.seed}:{rel}"), (ANCHOR - 6 * YEAR, ANCHOR))
        os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
        self.symlinks += 1

    def mkdir(self, rel: str) -> None:
        try:
            os.makedirs(os.path.join(self.root, rel), exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            pass

    def _write(self, rel: str, data: bytes, mode: int, mtime: int) -> bool:
        path = os.path.join(self.root, rel)
        try:
            try:
                f = open(path, "xb")
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                f = open(path, "xb")
        except (FileExistsError, IsADirectoryError, NotADirectoryError):
            return False  # a name drawn twice in one folder: the first one stays
        with f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.utime(path, ns=(mtime, mtime))
        return True

    def _count(self, kind: str, data: bytes, mode: int) -> None:
        self.files += 1
        self.bytes += len(data)
        if not data:
            self.empty_files += 1
            kind = "empty"
        if mode & 0o111:
            self.executables += 1
        entry = self.kinds.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += len(data)
        if data and self.files % self.SAMPLE_EVERY == 0:
            self._sample(kind, data[:self.SAMPLE_MAX])

    def _sample(self, kind: str, data: bytes) -> None:
        entry = self.sampled.setdefault(kind, [0, 0])
        entry[0] += len(data)
        entry[1] += len(self._compress(data))

    # ----------------------------------------------------------------------- finish
    def finish_dirs(self) -> tuple:
        """Directory modes and mtimes, bottom-up (writing into a folder moves its mtime)."""
        dirs = empty = 0
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
            rel = os.path.relpath(dirpath, self.root)
            rng = random.Random(f"dir:{self.seed}:{rel}")
            mode = 0o700 if os.path.basename(dirpath) in PRIVATE_DIRS else 0o755
            os.chmod(dirpath, mode)
            mtime = self.mtime(rng, (ANCHOR - 6 * YEAR, ANCHOR))
            os.utime(dirpath, ns=(mtime, mtime))
            if rel != ".":
                dirs += 1
                empty += not dirnames and not filenames
        return dirs, empty

    def ratio(self, kind: str) -> float | None:
        raw, packed = self.sampled.get(kind, (0, 0))
        return raw / packed if packed else None


def kind_group(kind: str) -> str:
    if kind in tree_content.TEXT_KINDS:
        return "text"
    return kind


def generate(root: str, files: int = DEFAULT_FILES, nbytes: int | None = None, seed: int = 1,
             quiet: bool = False) -> dict:
    """Write the tree for seed under root (which must be empty or absent)."""
    if nbytes is None:
        nbytes = files * BYTES_PER_FILE
    os.makedirs(root, exist_ok=True)
    if os.listdir(root):
        raise SystemExit(f"{root} is not empty: the tree is generated into an empty folder")
    started = time.monotonic()
    writer = TreeWriter(root, seed, files, nbytes)
    generate_layout(writer, Full)
    dirs, empty_dirs = writer.finish_dirs()
    elapsed = time.monotonic() - started
    summary = summarize(writer, dirs, empty_dirs, elapsed)
    if not quiet:
        print_summary(summary)
    return summary


def summarize(w: TreeWriter, dirs: int, empty_dirs: int, elapsed: float) -> dict:
    kinds = {k: {"files": v[0], "bytes": v[1], "ratio": w.ratio(k)}
             for k, v in sorted(w.kinds.items())}
    packed = 0.0
    for k, v in kinds.items():
        packed += v["bytes"] / (v["ratio"] or 1.0)
    return {"version": VERSION, "root": w.root, "seed": w.seed, "files": w.files, "dirs": dirs,
            "bytes": w.bytes,
            "symlinks": w.symlinks, "empty_files": w.empty_files, "empty_dirs": empty_dirs,
            "executables": w.executables, "duplicates": w.duplicates, "kinds": kinds,
            "compressor": w.compressor_name, "ratio": w.bytes / packed if packed else None,
            "elapsed_s": round(elapsed, 1)}


def print_summary(s: dict) -> None:
    print(f"{s['root']}: {s['files']:,} files, {s['dirs']:,} dirs ({s['empty_dirs']} empty), "
          f"{s['bytes'] / 1e6:,.1f} MB, {s['symlinks']} symlinks, {s['empty_files']} empty files, "
          f"{s['executables']} executables, {s['duplicates']} copies of other files; "
          f"seed {s['seed']}; {s['elapsed_s']} s")
    groups: dict = {}
    for kind, v in s["kinds"].items():
        g = groups.setdefault(kind_group(kind), [0, 0, 0.0])
        g[0] += v["files"]
        g[1] += v["bytes"]
        g[2] += v["bytes"] / (v["ratio"] or 1.0)
    for name, (count, nbytes, packed) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        ratio = f"{nbytes / packed:.2f}x" if packed else "-"
        print(f"  {name:10} {count:8,} files {nbytes / 1e6:10,.1f} MB  {s['compressor']} ~{ratio}")
    text = ", ".join(f"{k} {v['files']}" + (f" ({v['ratio']:.1f}x)" if v["ratio"] else "")
                     for k, v in s["kinds"].items() if kind_group(k) == "text")
    print(f"  text kinds: {text}")
    if s["ratio"]:
        print(f"  whole tree: ~{s['ratio']:.2f}x with {s['compressor']} per file (sampled "
              f"1 file in {TreeWriter.SAMPLE_EVERY})")


def parse_bytes(text: str) -> int:
    t = text.strip().upper().rstrip("B")
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 1024, "MI": 1 << 20, "GI": 1 << 30}
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            return int(float(t[:-len(suffix)]) * units[suffix])
    return int(float(t))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--bytes", type=parse_bytes, default=None,
                        help=f"total bytes, e.g. 1G, 300MB (default {BYTES_PER_FILE:,} a file)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutate", type=int, metavar="DAY", default=None,
                        help="change the tree generated with --seed as on day DAY (1, 2, ...)")
    parser.add_argument("--summary-json", metavar="FILE", default=None,
                        help="also write the summary (or mutate's counts) to FILE")
    args = parser.parse_args(argv)
    if args.mutate is not None:
        summary = mutate(args.dir, args.seed, args.mutate, quiet=False)
    else:
        summary = generate(args.dir, args.files, args.bytes, args.seed)
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
