#!/usr/bin/env python3
"""Uploads at once, many times over: `make stress` (or `python tools/stress.py`).

Starts a testnet (10 nodes) on 127.0.0.1 and repeats the cases that once
made nodes refuse uploads as not matching their keys (issue 16):

- large: three large files in three directories (64, 64 and 40 MiB) uploading
  at once;
- photos: a folder of 30 photo-sized files (2-8 MiB), three at once.

Every run backs up each case from a fresh copy of one client home (the same
key, so the nodes already hold what an earlier run stored and their disks do
not grow), restores it and compares it with its source. A run fails on a
single line of the client saying an upload did not match its key
(HASH_MISMATCH), a single node marked failed (nothing here fails a node), a
backup or restore that does not exit 0, a restore that differs, or a node
that went down. Prints each run as it ends and a summary (runs, mismatches,
nodes wrongly marked failed, median backup time per case); exits 1 if any
run failed.

Bounded: at most --runs runs, no run started after --time-limit seconds, every
command killed (by its pid) past its own limit. Every process it starts is
stopped by its pid on the way out, on Ctrl-C and SIGTERM too.

    .venv/bin/python tools/stress.py [--runs 20] [--nodes 10] [--time-limit 900]
                                     [--cases large,photos] [--no-restore] [--fail-fast] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from flud import procfs  # noqa: E402
from flud.testnet import launch  # noqa: E402
from tools.bench import common  # noqa: E402
from tools.treecmp import compare_trees  # noqa: E402

MiB = 1 << 20
COMMAND_LIMIT = 300.0      # a single backup or restore: past this it is killed and failed

# What the client says when a node refused an upload as not matching its key,
# and when it marks a node failed.
MISMATCH = re.compile(r"HASH_MISMATCH|hash_mismatch|uploaded data does not match", re.I)
FAILED = re.compile(r"node ([0-9a-f]{6,}) failed; using others")

CASES = {
    "large": "3 large files (64, 64, 40 MiB) in 3 directories, uploading at once",
    "photos": "30 photo-sized files (2-8 MiB)",
}


# ---- trees (also used by tools/bench/bench_faults.py) ---------------------------------

def _write_random(path: str, size: int, seed: int) -> None:
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 * MiB)
            f.write(rng.randbytes(n))
            left -= n


def _ready(root: str, stamp: str) -> bool:
    return os.path.isdir(root) and os.path.exists(root.rstrip("/") + f".{stamp}.ok")


def _done(root: str, stamp: str) -> None:
    open(root.rstrip("/") + f".{stamp}.ok", "w").close()  # beside it: not backed up


def large_files_tree(root: str, sizes=(64 * MiB, 64 * MiB + 4099, 40 * MiB),
                     seed: int = 1000) -> str:
    """One large file per directory (dir0/, dir1/, ...) and five small notes.
    Kept between runs when it was made with the same sizes and seed."""
    stamp = f"large-{seed}-" + "-".join(map(str, sizes))
    if _ready(root, stamp):
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i, size in enumerate(sizes):
        _write_random(os.path.join(root, f"dir{i}", f"large-{i}.bin"), size, seed + i)
    for i in range(5):
        _write_random(os.path.join(root, "notes", f"n{i}.txt"), 1000 * (i + 1), seed + 100 + i)
    _done(root, stamp)
    return root


def photo_tree(root: str, count: int = 30, seed: int = 2000) -> str:
    """count files of 2-8 MiB (and a few bytes), like a folder of photos."""
    stamp = f"photos-{seed}-{count}"
    if _ready(root, stamp):
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)
    for i in range(count):
        size = rng.randint(2 * MiB, 8 * MiB) + rng.randint(0, 4095)
        _write_random(os.path.join(root, f"IMG_{i:04d}.jpg"), size, seed + i)
    _done(root, stamp)
    return root


def make_case(name: str, data_dir: str) -> str:
    if name == "large":
        return large_files_tree(os.path.join(data_dir, "large"))
    if name == "photos":
        return photo_tree(os.path.join(data_dir, "photos"))
    raise ValueError(name)


# ---- what the client's output says ----------------------------------------------------

def mismatches(text: str) -> list:
    return [line for line in text.splitlines() if MISMATCH.search(line)]


def failed_nodes(text: str) -> set:
    return {m.group(1)[:12] for m in FAILED.finditer(text)}


def fresh_home(pristine: str, home: str) -> str:
    """A copy of a home made by `flud init` and never used: same key, no index."""
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(pristine, home, symlinks=True)
    return home


def dead_nodes(nodes: list) -> list:
    return [n for n in nodes if not launch.node_running(n)]


# ---- one case of one run -----------------------------------------------------------------

class Outcome:
    def __init__(self, case: str):
        self.case = case
        self.backup_s = None
        self.restore_s = None
        self.mismatches: list = []
        self.failed: set = set()
        self.problems: list = []

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.failed or self.problems)

    def line(self) -> str:
        parts = [f"{self.case:6}"]
        if self.backup_s is not None:
            parts.append(f"backup {self.backup_s:6.2f} s")
        if self.restore_s is not None:
            parts.append(f"restore {self.restore_s:5.2f} s")
        parts.append(f"mismatches {len(self.mismatches)}")
        parts.append(f"failed nodes {len(self.failed)}")
        text = ", ".join(parts)
        if self.failed:
            text += " (" + " ".join(sorted(self.failed)) + ")"
        text += "  ok" if self.ok else "  FAIL"
        for problem in self.problems:
            text += f"\n      {problem}"
        for line in self.mismatches[:3]:
            text += f"\n      {line.strip()[:240]}"
        return text


def command_limit(deadline: float) -> float:
    """A command may outlive the run's deadline a little, never COMMAND_LIMIT."""
    return min(COMMAND_LIMIT, max(60.0, deadline - time.monotonic() + 60.0))


def run_case(case: str, src: str, pristine: str, work: str, restore: bool,
             deadline: float) -> Outcome:
    out = Outcome(case)
    home = fresh_home(pristine, os.path.join(work, "home"))
    backup = common.flud("backup", src, "--home", home, timeout=command_limit(deadline))
    out.backup_s = backup.wall
    text = backup.stdout + backup.stderr
    out.mismatches = mismatches(text)
    out.failed = failed_nodes(text)
    if backup.rc != 0:
        out.problems.append(f"backup exited {backup.rc}" + (" (killed at its time limit)"
                            if backup.rc == -signal.SIGKILL else "") + ": "
                            + _last_error(backup.stderr))
        return out
    if restore:
        dest = os.path.join(work, "restored")
        shutil.rmtree(dest, ignore_errors=True)
        back = common.flud("restore", "--home", home, "--to", dest,
                           timeout=command_limit(deadline))
        out.restore_s = back.wall
        text = back.stdout + back.stderr
        out.mismatches += mismatches(text)
        out.failed |= failed_nodes(text)
        if back.rc != 0:
            out.problems.append(f"restore exited {back.rc}: " + _last_error(back.stderr))
        else:
            differences = compare_trees(src, os.path.join(dest, os.path.basename(src)))
            if differences:
                out.problems.append(f"restore differs: {differences[:5]}")
        shutil.rmtree(dest, ignore_errors=True)
    return out


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1][:300]


# ---- the whole run ----------------------------------------------------------------------

class Interrupted(BaseException):
    pass


def _on_term(signum, frame):
    raise Interrupted(f"signal {signum}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs (each backs up every case)")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--time-limit", type=float, default=900.0,
                        help="seconds after which no further run starts (default 900)")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma list of: " + ", ".join(f"{k} ({v})" for k, v in CASES.items()))
    parser.add_argument("--work", default=os.path.join(ROOT, "run", "stress"))
    parser.add_argument("--no-restore", action="store_true",
                        help="back up only (no restore and compare after each backup)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failed run")
    parser.add_argument("--keep", action="store_true",
                        help="keep the testnet's directory and the client home for a look")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started ignoring it
    started = time.monotonic()
    deadline = started + args.time_limit
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    results: list = []   # [(run, Outcome)]
    stopped = None       # why the runs ended early, if they did
    testnet = common.Testnet(os.path.join(work, "testnet"), args.nodes, timeout=120)
    try:
        common.log(f"stress: making the trees ({', '.join(cases)}) in {data}")
        sources = {case: make_case(case, data) for case in cases}
        common.log(f"stress: testnet up --nodes {args.nodes}")
        testnet.up()
        pristine = os.path.join(work, "home-pristine")
        shutil.rmtree(pristine, ignore_errors=True)
        common.flud("init", "--home", pristine, "--testnet", testnet.dir,
                    timeout=120).check("flud init")
        for run in range(1, args.runs + 1):
            if time.monotonic() > deadline:
                stopped = f"time limit of {args.time_limit:.0f} s reached"
                common.log(f"stress: {stopped} after {run - 1} of {args.runs} runs")
                break
            for case in cases:
                out = run_case(case, sources[case], pristine, work, not args.no_restore,
                               deadline)
                dead = dead_nodes(testnet.nodes)
                if dead:
                    out.problems.append("nodes went down: " + ", ".join(
                        f"{n['node_id'][:12]} (pid {n['pid']})" for n in dead))
                results.append((run, out))
                print(f"run {run:3}/{args.runs} {out.line()}", flush=True)
                if dead:
                    stopped = "nodes went down"
                    break
            if stopped or (args.fail_fast and not all(o.ok for r, o in results if r == run)):
                break
    except (KeyboardInterrupt, Interrupted) as err:
        stopped = f"interrupted ({str(err) or 'Ctrl-C'})"
        common.log(f"stress: {stopped}; stopping the testnet")
    finally:
        stop_testnet(testnet)
        if not args.keep:
            testnet.remove()   # the nodes' stores: the trees are kept for the next time
            for name in ("home", "home-pristine", "restored"):
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    return _summary(results, args, started, stopped)


def stop_testnet(testnet) -> None:
    """`flud testnet down`, then SIGKILL for any node still alive: those of
    testnet.json, and those whose node.json is in the testnet's directory and
    whose command line names it (a start cut short leaves no testnet.json)."""
    try:
        testnet.down()
    finally:
        launch.signal_all(_nodes_of(testnet.dir), signal.SIGKILL)


def _nodes_of(directory: str) -> list:
    found = []
    if not os.path.isdir(directory):
        return found
    for name in os.listdir(directory):
        try:
            with open(os.path.join(directory, name, "node.json")) as f:
                pid = int(json.load(f)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        cmdline = procfs.command_line(pid)
        start = procfs.start_ticks(pid)
        if cmdline is not None and directory in cmdline and start is not None:
            found.append((pid, start))
    return found


def _summary(results: list, args, started: float, stopped: str | None) -> int:
    runs = len({r for r, _ in results})
    failed_runs = sorted({r for r, o in results if not o.ok})
    mismatch_count = sum(len(o.mismatches) for _, o in results)
    wrongly_failed = sum(len(o.failed) for _, o in results)
    print()
    print(f"stress: {runs} run(s) of {args.runs} in {time.monotonic() - started:.0f} s"
          + (f" ({stopped})" if stopped else ""))
    print(f"  uploads refused as not matching their keys (HASH_MISMATCH): {mismatch_count}")
    print(f"  nodes wrongly marked failed: {wrongly_failed}")
    for case in CASES:
        times = [o.backup_s for _, o in results if o.case == case and o.backup_s is not None]
        restores = [o.restore_s for _, o in results if o.case == case and o.restore_s is not None]
        if times:
            line = (f"  {case}: {len(times)} backups, median {statistics.median(times):.2f} s "
                    f"(min {min(times):.2f}, max {max(times):.2f})")
            if restores:
                line += f"; restores median {statistics.median(restores):.2f} s"
            print(line)
    print(f"  failed runs: {failed_runs if failed_runs else 'none'}")
    interrupted = bool(stopped and stopped.startswith("interrupted"))
    ok = runs > 0 and not failed_runs and not interrupted and stopped != "nodes went down"
    print("stress: " + ("ok" if ok else "interrupted" if interrupted and not failed_runs
                        else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
