"""Changed bytes, not changed files (issue 27): a large file changed in the middle.

    .venv/bin/python tools/bench/bench_cdc.py [--quick] [--cdc-size 256MiB] [--nodes N]
    make bench BENCH_ARGS="--only cdc"

- A file of random bytes (256 MiB) is backed up into a fresh home, backed up
  again unchanged (what any backup sends: records and a head), then 1 MiB of
  new bytes is inserted at 100 MiB and it is backed up a third time. The
  figure is what that third backup sent (flud's own count: every share and
  tar), against n/k x 4 MiB; restic's figure for the same change (`Added to
  the repository`, before and after its compression) beside it, from a local
  repository (restic 0.14; installed with apt-get when missing and allowed).
- The changed file is restored and compared byte for byte.
- The chunker's throughput (flud/_cdc.c over random bytes in memory) and
  the chunk pass's (read + cut + keyed BLAKE3 of each chunk, from the file),
  in MB/s of plaintext on one core; the backups' client peak RSS.
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import restic as restic_tool  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402
from bench_backup import parse_size  # noqa: E402

NAME = "bench_cdc"
INSERT = MiB
CHUNK_SIZE = 512 * 1024   # the average chunk the bench measures (a home setting)


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_cdc")
    g.add_argument("--cdc-size", default=None,
                   help="the file's size (default 256MiB; 64MiB quick)")
    g.add_argument("--cdc-at", default="100MiB", help="where the insert goes (default 100MiB)")
    g.add_argument("--cdc-no-restic", action="store_true", help="flud's figures alone")


def _insert(src: str, dest: str, at: int, size: int) -> None:
    """dest = src with `size` random bytes inserted at `at`, streamed."""
    with open(src, "rb") as f, open(dest, "wb") as out:
        left = at
        while left:
            piece = f.read(min(left, 4 * MiB))
            out.write(piece)
            left -= len(piece)
        out.write(os.urandom(size))
        shutil.copyfileobj(f, out, 4 * MiB)


def chunker_rates(size: int) -> tuple:
    """(MB/s of the cut alone, MB/s of the chunk pass from a file) on one core."""
    from flud.chunker import Chunker, ChunkSizes
    from flud.client.backup.chunked import chunk_file
    from flud.client.backup.source_scan import Entry
    data = os.urandom(min(size, 256 * MiB))
    chunker = Chunker(b"k" * 32, ChunkSizes())
    view = memoryview(data)
    started = time.process_time()
    for offset in range(0, len(data), MiB):
        chunker.cuts(view[offset:offset + MiB])
    cut = len(data) / (time.process_time() - started) / MB
    path = os.path.join(common.RUN_DIR, "cdc", "rate.bin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    entry = Entry(path, "file", 0o644, os.stat(path).st_mtime_ns, len(data))
    started = time.process_time()
    chunk_file(entry, b"k" * 32, ChunkSizes(), b"i" * 32)
    passed = len(data) / (time.process_time() - started) / MB
    os.unlink(path)
    return cut, passed


def run(args) -> list:
    size = parse_size(args.cdc_size) if args.cdc_size else (64 * MiB if args.quick else 256 * MiB)
    at = min(parse_size(args.cdc_at), size // 2)
    base = os.path.join(common.RUN_DIR, "cdc")
    data = os.path.join(base, "data")
    size_txt = f"{size / MiB:g} MiB"
    rows = []
    src = os.path.join(data, "src")
    original = common.random_file(os.path.join(data, f"orig-{size}.bin"), size)
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    disk = os.path.join(src, "disk.img")
    shutil.copyfile(original, disk)
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    sent, baseline, first_sent, rss, identical, k, n = [], [], [], [], None, 4, 8
    try:
        tn.up()
        for i in range(args.repeat):
            shutil.copyfile(original, disk)
            home = common.new_home(os.path.join(base, f"cl{i}"), tn.dir)
            cfg = common.home_config(home)
            cfg["chunk_size"] = CHUNK_SIZE   # the default since issue 27; set as measured
            with open(os.path.join(home, "config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
            k, n = cfg["k"], cfg["n"]
            log(f"bench_cdc: backup of {size_txt} ({i + 1}/{args.repeat})")
            r = common.flud("backup", src, "--home", home, "--json").check("flud backup")
            first_sent.append(common.parse_backup(r.stdout)["sent"])
            rss.append(r.maxrss / MB)
            r = common.flud("backup", src, "--home", home, "--json").check(
                "flud backup (no change)")
            baseline.append(common.parse_backup(r.stdout)["sent"])
            _insert(original, disk + ".new", at, INSERT)
            os.replace(disk + ".new", disk)
            log(f"bench_cdc: backup after {INSERT // MiB} MiB inserted at {at / MiB:g} MiB")
            r = common.flud("backup", src, "--home", home, "--json").check("flud backup (insert)")
            sent.append(common.parse_backup(r.stdout)["sent"])
            rss.append(r.maxrss / MB)
            if i == 0:
                dest = os.path.join(base, "restored")
                shutil.rmtree(dest, ignore_errors=True)
                common.flud("restore", "--home", home, "--to", dest).check("flud restore")
                identical = filecmp.cmp(disk, os.path.join(dest, "src", "disk.img"),
                                        shallow=False)
                shutil.rmtree(dest, ignore_errors=True)
        target = n / k * 4 * MiB
        added = _restic(args, original, disk, src, at, base)
        rows += [
            Row(f"sent after {INSERT // MiB} MiB inserted at {at / MiB:g} MiB of {size_txt}",
                [s / MB for s in sent], "MB", target / MB, "<=",
                f"restic: {added}",
                f"n/k x 4 MiB = {target / MB:.1f} MB; a no-change backup sent "
                f"{common.fmt(common.median(baseline) / MB)} MB; the first "
                f"{common.fmt(common.median(first_sent) / MB)} MB; restored file "
                f"{'identical' if identical else 'DIFFERENT'}; before chunks: 337 MB"),
            Row(f"client peak RSS, {size_txt} backups", rss, "MB", 48, "<=", "-",
                "kernel high-water mark (wait4), first and third backups"),
        ]
    except common.BenchError as err:
        log(f"bench_cdc: {err}")
        rows.append(Row("bench_cdc failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(src, ignore_errors=True)
        for name in os.listdir(base) if os.path.isdir(base) else []:
            if name != "data":
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    cut, passed = chunker_rates(size)
    rows += [Row("chunker cut points, one core", [cut], "MB/s", None, None, "fastcdc 1.7 "
                 "(PyPI, unkeyed): 3,400 MB/s here",
                 "gear hash, min 256 KiB / avg 512 KiB / max 4 MiB, CPU time"),
             Row("chunk pass: read + cut + keyed BLAKE3", [passed], "MB/s", None, None, "-",
                 "one core's CPU time, from a file (O_DIRECT where the filesystem allows)")]
    return rows


def _restic(args, original, disk, src, at, base) -> str:
    if args.cdc_no_restic:
        return "not run (--cdc-no-restic)"
    binary, note = restic_tool.find_restic()
    if not binary:
        return note
    repo = restic_tool.Restic(binary, os.path.join(base, "restic-repo"))
    try:
        repo.init()
        shutil.copyfile(original, disk)
        repo.backup(src)
        _insert(original, disk + ".new", at, INSERT)
        os.replace(disk + ".new", disk)
        found = restic_tool.parse_added(repo.backup(src).stdout)
        if not found:
            return "restic's output not understood"
        text = f"added {found['added'] / MB:.1f} MB"
        if "stored" in found:
            text += f" ({found['stored'] / MB:.1f} MB stored)"
        return text + f", restic {restic_tool.version(binary)}"
    finally:
        repo.remove()


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
