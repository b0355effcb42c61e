#!/usr/bin/env python3
"""Faults (issue 16): a stalled holder, and uploads at once, on a 50-node testnet.

    .venv/bin/python tools/bench/bench_faults.py [--quick] [--repeat N] [--nodes 50]
                                                 [--backups 50]

- Restore of the demo's sample tree (tools/demo.py: the home mix and large
  files of 64, 24, 16 and 8 MiB), whole command: all nodes up, and with the
  node that holds the most primary blocks stopped (SIGSTOP: its connections
  stay open, nothing answers) before the restore starts. Median of --repeat
  each; target: stopped <= 2 x all-up + 5 s.
- Backup of the same tree from a fresh copy of one client home (the same key:
  the same placement, so the stopped node is one the backup wants), all up
  and with that node stopped; median of --repeat; the same target.
- --backups backups (default 50) of the concurrency cases in turn (three large
  files at once; 30 photo-sized files, tools/stress.py), counting uploads
  refused as not matching their keys (HASH_MISMATCH) and nodes marked failed
  (none is at fault here); target 0 and 0.

A stopped node always gets SIGCONT (by its pid) before the next step, and the
testnet is stopped on the way out, also on Ctrl-C.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row, Testnet, log  # noqa: E402

from flud.testnet import launch  # noqa: E402
from tools.demo import make_demo_tree  # noqa: E402
from tools.stress import make_case  # noqa: E402

NAME = "bench_faults"
SLACK = 5.0  # seconds: the target is stopped <= 2 x all up + SLACK


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_faults")
    g.add_argument("--backups", type=int, default=None,
                   help="backups of the concurrency cases, counted (default 50; 10 with --quick)")


def run(args) -> list:
    backups = args.backups or (10 if args.quick else 50)
    base = os.path.join(common.RUN_DIR, "faults")
    data = os.path.join(common.RUN_DIR, "data", "faults")
    tree = _demo_tree(os.path.join(data, "demo-tree"), quick=args.quick)
    rows = []
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    try:
        tn.up()
        pristine = common.new_home(os.path.join(base, "home-pristine"), tn.dir)
        home = _copy_home(pristine, os.path.join(base, "home"))
        common.flud("backup", tree, "--home", home).check("flud backup (the demo tree)")
        victim = _busiest_holder(tn, home)
        log(f"bench_faults: the stalled node is {victim['node_id'][:12]} (pid {victim['pid']})")
        rows += _restores(args, tn, base, tree, home, victim)
        rows += _backups(args, tn, base, tree, pristine, victim)
        rows += _at_once(tn, base, data, pristine, backups, quick=args.quick)
    except common.BenchError as err:
        log(f"bench_faults: {err}")
        rows.append(Row("bench_faults failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    return rows


# ---- pieces --------------------------------------------------------------------------

def _demo_tree(path: str, quick: bool) -> str:
    stamp = path + (".quick.ok" if quick else ".ok")
    if os.path.isdir(path) and os.path.exists(stamp):
        return path
    shutil.rmtree(path, ignore_errors=True)
    for old in (path + ".ok", path + ".quick.ok"):
        if os.path.exists(old):
            os.unlink(old)
    if quick:
        make_demo_tree(path, big_mib=16, large=[("videos/holiday.mp4", 8),
                                                ("photos/2024/raw/IMG_0042.dng", 4)])
    else:
        make_demo_tree(path)
    open(stamp, "w").close()
    return path


def _copy_home(pristine: str, home: str) -> str:
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(pristine, home, symlinks=True)
    return home


def _busiest_holder(tn, home) -> dict:
    """The node (never node 0, which clients ask for the member list) that
    holds the most primary blocks of the backup's large files."""
    r = common.run([common.PY, os.path.abspath(__file__), "holders", home], timeout=120)
    if r.rc != 0:
        raise common.BenchError(f"reading the manifest failed: {r.stderr[-1500:]}")
    held = json.loads(r.stdout)
    by_id = {n["node_id"]: n for n in tn.nodes[1:]}
    ranked = sorted((count, node) for node, count in held.items() if node in by_id)
    if not ranked:
        raise common.BenchError("the manifest names no holder of a large file but node 0")
    return by_id[ranked[-1][1]]


class _Stopped:
    """SIGSTOP a node; leaving always sends SIGCONT (the same process only)."""

    def __init__(self, node: dict):
        self.node = node

    def __enter__(self):
        os.kill(self.node["pid"], signal.SIGSTOP)
        return self

    def __exit__(self, *exc):
        if launch.node_running(self.node):
            os.kill(self.node["pid"], signal.SIGCONT)


def _target_row(figure, stalled, all_up_median, note, anchor="-") -> Row:
    target = 2 * all_up_median + SLACK if all_up_median is not None else None
    return Row(figure, stalled, "s", target, "<=" if target is not None else None, anchor, note,
               target_text=(f"≤ {common.fmt(target)} s (2x + {SLACK:.0f} s)"
                            if target is not None else None))


def _restore_once(base, home, tree, what) -> common.CmdResult:
    dest = os.path.join(base, "restored")
    shutil.rmtree(dest, ignore_errors=True)
    r = common.flud("restore", "--home", home, "--to", dest, timeout=600).check(what)
    from tools.treecmp import compare_trees
    problems = compare_trees(tree, os.path.join(dest, os.path.basename(tree)))
    shutil.rmtree(dest, ignore_errors=True)
    if problems:
        raise common.BenchError(f"{what}: the restore differs: {problems[:5]}")
    return r


def _restores(args, tn, base, tree, home, victim) -> list:
    up, stalled = [], []
    for i in range(args.repeat):
        log(f"bench_faults: restore, all up ({i + 1}/{args.repeat})")
        up.append(_restore_once(base, home, tree, "restore (all up)").wall)
        log(f"bench_faults: restore, node {victim['node_id'][:12]} stopped "
            f"({i + 1}/{args.repeat})")
        with _Stopped(victim):
            stalled.append(_restore_once(base, home, tree, "restore (a holder stopped)").wall)
        log(f"bench_faults: restore {up[-1]:.2f} s all up, {stalled[-1]:.2f} s stopped")
    med = common.median(up)
    return [Row("restore, demo tree, all nodes up (whole command)", up, "s", None, None, "-"),
            _target_row("restore, demo tree, one primary holder stopped (SIGSTOP)", stalled, med,
                        f"all up {common.fmt(med)} s; stopped: {[round(x, 2) for x in stalled]}")]


def _failed_nodes(r) -> set:
    """The nodes a --json backup failed for the rest of its run (their ids'
    first 12 hex digits), from its summary."""
    return {node[:12] for node in
            common.summary_record(r.stdout, "backup").get("failed_nodes", [])}


def _backups(args, tn, base, tree, pristine, victim) -> list:
    up, stalled, wrongly = [], [], 0
    for i in range(args.repeat):
        log(f"bench_faults: backup, all up ({i + 1}/{args.repeat})")
        home = _copy_home(pristine, os.path.join(base, "home-b"))
        r = common.flud("backup", tree, "--home", home, "--json",
                        timeout=600).check("backup (all up)")
        up.append(r.wall)
        wrongly += len(_failed_nodes(r))
        log(f"bench_faults: backup, node {victim['node_id'][:12]} stopped ({i + 1}/{args.repeat})")
        home = _copy_home(pristine, os.path.join(base, "home-b"))
        with _Stopped(victim):
            r = common.flud("backup", tree, "--home", home, "--json", timeout=600)
        r.check("backup (a holder stopped)")
        stalled.append(r.wall)
        wrongly += len(_failed_nodes(r) - {victim["node_id"][:12]})
        log(f"bench_faults: backup {up[-1]:.2f} s all up, {stalled[-1]:.2f} s stopped")
    med = common.median(up)
    note = f"all up {common.fmt(med)} s; stopped: {[round(x, 2) for x in stalled]}"
    if wrongly:
        note += f"; {wrongly} healthy node(s) marked failed"
    return [Row("backup, demo tree, all nodes up (whole command)", up, "s", None, None, "-"),
            _target_row("backup, demo tree, one holder stopped (SIGSTOP)", stalled, med, note)]


def _at_once(tn, base, data, pristine, backups, quick) -> list:
    cases = ["large", "photos"]
    sources = {case: make_case(case, data) for case in cases}
    mismatch_count, wrongly, failed_runs = 0, 0, 0
    times = {case: [] for case in cases}
    for i in range(backups):
        case = cases[i % len(cases)]
        home = _copy_home(pristine, os.path.join(base, "home-c"))
        r = common.flud("backup", sources[case], "--home", home, "--json", timeout=600)
        summary = common.summary_record(r.stdout, "backup")
        found, failed = summary.get("hash_mismatches", 0), len(_failed_nodes(r))
        mismatch_count += found
        wrongly += failed
        failed_runs += r.rc != 0
        if r.rc == 0:
            times[case].append(r.wall)
        log(f"bench_faults: at once {i + 1}/{backups} {case}: {r.wall:.2f} s, exit {r.rc}, "
            f"{found} mismatches, {failed} nodes marked failed")
    return [
        Row(f"backups of large files at once that exited 0 (3 large files / 30 photos in turn)",
            [backups - failed_runs], "", backups, ">=", "-",
            f"{failed_runs} of {backups} failed" if failed_runs else ""),
        Row("uploads refused as not matching their key (HASH_MISMATCH)", [mismatch_count], "",
            0, "<=", "-"),
        Row("healthy nodes marked failed (in those backups)", [wrongly], "", 0, "<=", "-"),
        Row("backup, 3 large files at once (64+64+40 MiB)", times["large"], "s", None, None, "-"),
        Row("backup, 30 photo-sized files (2-8 MiB)", times["photos"], "s", None, None, "-"),
    ]


# ---- subprocess mode: the manifest is read where no reactor matters ------------------------

def _holders_main(home: str) -> int:
    from flud.client.home import ClientHome
    client = ClientHome(home)
    try:
        snaps = client.index.snapshots()
        manifest = client.index.manifest(snaps[-1]["id"])
    finally:
        client.close()
    k = manifest["k"]
    contents = manifest["contents"]
    held = {}
    for record in (contents.values() if isinstance(contents, dict) else contents):
        if isinstance(record, dict) and record.get("t") == "L":
            for extent in record["ext"]:
                for index, _, node in extent["shares"]:
                    if index < k:
                        held[node] = held.get(node, 0) + len(extent["segs"])
    json.dump(held, sys.stdout)
    return 0


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "holders":
        sys.exit(_holders_main(sys.argv[2]))
    sys.exit(main())
