"""A restore a user can steer and resume (issue 28's figures), on a testnet.

    .venv/bin/python tools/bench/bench_restore.py [--quick] [--nodes N]
                                                  [--resume-files N] [--resume-bytes B]
                                                  [--dump-bytes B]

- Interrupted restore: a generated tree (default 4,000 files, 250 MB, 40 of
  them large: tools/restore_resume.py) backed up, `flud restore` SIGKILLed
  once half its bytes landed under DEST, then resumed with `--overwrite
  if-changed`. Figures: the bytes the second run fetched (its --json
  fetched_bytes) against the issue's target, 55% of the tree plus one
  segment per large file in flight at the kill; leftover NAME.flud-restored
  and temp files (target 0); the tree compared with the source.
- `flud dump` of a large file (default 1 GiB): SHA-256 of stdout against
  the file's, and the dump's peak RSS above its static footprint (its own
  `memory:` line) against the memory budget (64 MiB, --memory-budget's
  default).
--quick: 400 files, 25 MB; a 64 MiB dump; 8 nodes.
Table: out/bench_restore.txt (and .json).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402

sys.path.insert(0, common.ROOT)
from tools.restore_resume import (kill_midway, leftovers, make_tree, resume,  # noqa: E402
                                  resume_limit)

NAME = "bench_restore"
SEGMENT = 2 * MiB
BUDGET = 64 * MiB
TIMEOUT = 3600


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_restore")
    g.add_argument("--resume-files", type=int, default=None, metavar="N",
                   help="files in the interrupted restore's tree (default 4000; 400 quick)")
    g.add_argument("--resume-bytes", type=float, default=None, metavar="B",
                   help="its bytes (default 250e6; 25e6 quick)")
    g.add_argument("--dump-bytes", type=float, default=None, metavar="B",
                   help="the dumped file's bytes (default 1 GiB; 64 MiB quick)")


def run(args) -> list:
    files = args.resume_files or (400 if args.quick else 4000)
    total = int(args.resume_bytes or (25e6 if args.quick else 250e6))
    dump_bytes = int(args.dump_bytes or (64 * MiB if args.quick else 1 << 30))
    nodes = min(args.nodes, 8) if args.quick else min(args.nodes, 12)
    base = os.path.join(common.RUN_DIR, "restore")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    tn = Testnet(os.path.join(base, "tn"), nodes, noise=getattr(args, "noise", None))
    rows = []
    try:
        tn.up()
        home = common.new_home(os.path.join(base, "home"), tn.dir)
        rows += _resume_rows(base, home, files, total)
        rows += _dump_rows(base, home, dump_bytes)
    except common.BenchError as err:
        log(f"bench_restore: {err}")
        rows.append(Row("bench_restore failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        shutil.rmtree(base, ignore_errors=True)
    return rows


def _resume_rows(base, home, files, total) -> list:
    tree = os.path.join(base, "tree")
    log(f"bench_restore: a tree of {files} files, {total / MB:.0f} MB")
    total = make_tree(tree, files, total, max(1, files // 100), seed=28)
    common.flud("backup", tree, "--home", home, timeout=TIMEOUT).check("flud backup")
    dest = os.path.join(base, "dest")
    log("bench_restore: restore, killed at half its bytes")
    # throttled (~6 s to half), so that the kill lands near half on a busy machine
    killed = kill_midway(home, dest, total, fraction=0.5, timeout=TIMEOUT,
                         extra=["tree", "--limit-download", f"{max(8, total // 12_000_000)}M"])
    log(f"bench_restore: killed with {killed['fraction']:.0%} landed, "
        f"{killed['large_in_flight']} large file(s) in flight; resuming")
    code, summary, stderr = resume(home, dest, timeout=TIMEOUT, extra=["tree"])
    if code != 0:
        raise common.BenchError(f"the resumed restore exited {code}: {stderr[-2000:]}")
    from tools.treecmp import compare_trees
    problems = compare_trees(tree, os.path.join(dest, "tree"))
    left = leftovers(dest)
    fetched = summary["fetched_bytes"]
    issue_target = 0.55 * total + killed["large_in_flight"] * SEGMENT
    note = (f"{files} files, {total / MB:.0f} MB; killed with {killed['fraction']:.1%} landed "
            f"after {killed['seconds']:.1f} s, {killed['large_in_flight']} large in flight; "
            f"resume: {summary['unchanged']} kept, {summary['resumed']} resumed, "
            f"{summary['files']} written, {summary['elapsed']:.1f} s; "
            f"tree {'identical' if not problems else 'DIFFERS: ' + '; '.join(problems[:3])}")
    return [
        Row("resumed restore: bytes fetched (share bytes)", [fetched / MB], "MB",
            issue_target / MB, "<=", "issue 28", note),
        Row("resumed restore: fetched, as a share of the tree", [100 * fetched / total], "%",
            100 * resume_limit(total, killed["fraction"], killed["large_in_flight"], SEGMENT)
            / total, "<=", "issue 28",
            "target: what had not landed + 5% + a segment per large file in flight"),
        Row("resumed restore: NAME.flud-restored and temp files left", [len(left)], "",
            0, "<=", "issue 28", ", ".join(left[:5])),
        Row("resumed restore: tree differences", [len(problems)], "", 0, "<=", "issue 28"),
    ]


def _dump_rows(base, home, size) -> list:
    src = os.path.join(base, "one", "big.bin")
    log(f"bench_restore: a {size / MiB:.0f} MiB file, backed up")
    digest = hashlib.sha256()
    os.makedirs(os.path.dirname(src))
    with open(src, "wb") as f:
        block = os.urandom(4 * MiB)
        for i in range(0, size, len(block)):
            piece = block[: min(len(block), size - i)]
            piece = i.to_bytes(8, "big") + piece[8:] if len(piece) > 8 else piece
            f.write(piece)
            digest.update(piece)
    common.flud("backup", os.path.dirname(src), "--home", home,
                timeout=TIMEOUT).check("flud backup")
    log("bench_restore: flud dump")
    proc = subprocess.Popen([common.PY, "-m", "flud", "dump", "--home", home, "--json", src],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=common.ROOT)
    got, count = hashlib.sha256(), 0
    while True:
        chunk = proc.stdout.read(4 * MiB)
        if not chunk:
            break
        got.update(chunk)
        count += len(chunk)
    stderr = proc.stderr.read().decode()
    if proc.wait() != 0:
        raise common.BenchError(f"flud dump exited {proc.returncode}: {stderr[-2000:]}")
    summary = common.summary_record(stderr, "dump")   # --json: stderr's last line
    memory = common.memory_of(summary)
    rss = memory.get("peak_rss", float("nan"))
    static = memory.get("static_rss", float("nan"))
    seconds = summary.get("elapsed", float("nan"))
    same = got.digest() == digest.digest() and count == size
    return [
        Row(f"dump of a {size / MiB:.0f} MiB file: SHA-256 equal", [1 if same else 0], "",
            1, ">=", "issue 28", f"{count} bytes out in {seconds:.1f} s "
                                 f"({count / MB / seconds if seconds else 0:.0f} MB/s)"),
        Row("dump: peak RSS above static", [(rss - static) / MB], "MB", BUDGET / MB, "<=",
            "issue 28", f"peak RSS {rss / MB:.0f} MB, static {static / MB:.0f} MB; "
                        f"bound: the memory budget (64 MiB)"),
    ]


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
