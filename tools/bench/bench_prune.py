"""Time and peak RSS of `flud prune` on a repository of 30 snapshots (issue 19's figures).

    .venv/bin/python tools/bench/bench_prune.py [--quick] [--nodes N] [--prune-files N]
        [--prune-bytes B] [--prune-snapshots S] [--prune-keep-last K] [--prune-seed S]

- The tree: gen_tree.py (default 50,000 files, 1 GB; --quick: 2,000 files, 40 MB), made
  once under run/bench/data and kept; the run backs up its own copy.
- On a fresh testnet (50 nodes; 12 with --quick) and client home: 30 snapshots, one a
  simulated day (FLUD_NOW): day 1 backs up the tree, each later day changes it with
  gen_tree.mutate (a tenth of the files changed or added, 1% removed) and backs it up.
- Then, on day 30: `flud forget --keep-last 10` and two `flud prune --grace 0` runs (the
  first finds the forgotten snapshots' objects unreferenced, the second deletes them:
  an object is deleted only when two runs in a row find it so).
- Figures: wall time of each prune run (whole command) against the last backup's (target:
  prune <= the backup's own time), and peak RSS of each (wait4 ru_maxrss) against static +
  64 MiB (the default --memory-budget) + 16 MB, static being what prune prints in its
  memory line (the client ready to work, before any transfer).
Table: out/bench_prune.txt (and out/bench_prune.json). Takes ~4 min with --quick.
"""
from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402
from gen_tree import mutate, parse_bytes  # noqa: E402
import simdays  # noqa: E402

NAME = "bench_prune"
BUDGET = 64 * MiB  # flud's default --memory-budget
RSS_SLACK = 16 * MB  # issue 19: peak RSS within static + budget + 16 MB


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_prune")
    g.add_argument("--prune-files", type=int, default=None, metavar="N",
                   help="files in the generated tree (default 50000; 2000 with --quick)")
    g.add_argument("--prune-bytes", type=parse_bytes, default=None, metavar="B",
                   help="bytes in the generated tree (default 1G; 20 kB a file with --quick)")
    g.add_argument("--prune-snapshots", type=int, default=30, metavar="S",
                   help="snapshots made before forget and prune (default 30)")
    g.add_argument("--prune-keep-last", type=int, default=10, metavar="K",
                   help="forget --keep-last K (default 10)")
    g.add_argument("--prune-seed", type=int, default=1, metavar="S",
                   help="generator and mutation seed (default 1)")


def run(args) -> list:
    files = args.prune_files or (2000 if args.quick else 50_000)
    nbytes = args.prune_bytes or (None if args.quick else 10**9)
    snapshots, seed = args.prune_snapshots, args.prune_seed
    base = os.path.join(common.RUN_DIR, "prune")
    source, summary = simdays.kept_tree(files, nbytes, seed)
    tree = simdays.copy_tree(source, os.path.join(base, "home"))
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    try:
        tn.up()
        measured = _measure(tn, base, tree, seed, snapshots, args.prune_keep_last)
        rows = _rows(measured, snapshots, args.prune_keep_last)
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows = [Row(f"{NAME} failed", [], note=str(err)[:300])]
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=f"{NAME}: {summary['files']:,} files, "
                                       f"{summary['bytes'] / MB:,.0f} MB, seed {seed}; "
                                       f"{snapshots} snapshots, forget --keep-last "
                                       f"{args.prune_keep_last}; {args.nodes}-node testnet",
                           out=f)
    return rows


def _measure(tn, base, tree, seed, snapshots, keep_last) -> dict:
    home = common.new_home(os.path.join(base, "client"), tn.dir)
    out = {"backups": []}
    for day in range(1, snapshots + 1):
        if day > 1:
            mutate(tree, seed, day)
        r = common.flud("backup", tree, "--home", home, "--json", env=simdays.env_at(day),
                        timeout=simdays.TIMEOUT)
        if r.rc not in (0, 1):  # 1: some files skipped
            r.check(f"flud backup, day {day}")
        s = common.parse_backup(r.stdout)
        out["backups"].append({"wall": r.wall, "rss": r.maxrss, "static": s.get("static_rss"),
                               "files": s.get("files")})
        log(f"{NAME}: backup {day}/{snapshots}: {r.wall:.1f} s, "
            f"{r.maxrss / MB:,.0f} MB peak RSS")
    out["stored_before"], out["garbage_before"] = simdays.node_bytes(tn)
    r = common.flud("forget", "--home", home, "--keep-last", keep_last,
                    env=simdays.env_at(snapshots, 2), timeout=simdays.TIMEOUT)
    r.check("flud forget")
    out["forget"] = r.wall
    out["prunes"] = []
    for run_no in (1, 2):
        r = common.flud("prune", "--home", home, "--grace", "0", "--json",
                        env=simdays.env_at(snapshots, 2 + run_no), timeout=simdays.TIMEOUT)
        r.check(f"flud prune, run {run_no}")
        p = simdays.parse_prune(r.stdout)
        p.update(wall=r.wall, rss=r.maxrss, cpu=r.cpu)
        p["stored_after"], p["garbage_after"] = simdays.node_bytes(tn)
        out["prunes"].append(p)
        log(f"{NAME}: prune run {run_no}: {r.wall:.1f} s, {r.maxrss / MB:,.0f} MB peak RSS, "
            f"{(p.get('freed') or 0) / MB:,.1f} MB freed")
    out["kept"] = simdays.remote_snapshots(home, simdays.env_at(snapshots, 5))
    return out


def _rows(m, snapshots, keep_last) -> list:
    last = m["backups"][-1]
    first = m["backups"][0]
    rows = []
    stored, garbage = m["stored_before"], m["garbage_before"]
    for i, p in enumerate(m["prunes"], 1):
        static = p.get("static_rss") or last["static"]
        whose = "prune's own" if p.get("static_rss") else "the last backup's"
        bound = (static + BUDGET + RSS_SLACK) / MB if static else None
        what = ("finds the forgotten snapshots' objects unreferenced" if i == 1
                else "deletes what run 1 found")
        rows += [
            Row(f"prune --grace 0, run {i} (whole command)", [p["wall"]], "s", last["wall"], "<=",
                "-", f"{what}: {p.get('deleted')} objects ({p.get('shares_deleted')} shares, "
                     f"{(p.get('freed') or 0) / MB:,.1f} MB) deleted, "
                     f"{p.get('repacked_members')} members of {p.get('repacked_bundles')} "
                     f"bundles repacked; nodes {stored / MB:,.1f} -> "
                     f"{p['stored_after'] / MB:,.1f} MB (of it archive garbage "
                     f"{garbage / MB:,.1f} -> {p['garbage_after'] / MB:,.1f} MB); CPU "
                     f"{p['cpu']:.1f} s; target: <= the "
                     f"last backup's whole command ({last['wall']:.1f} s)"),
            Row(f"peak RSS, prune run {i}", [p["rss"] / MB], "MB", bound,
                "<=" if bound else None, "-",
                f"wait4 ru_maxrss; target: static {common.fmt(static and static / MB)} MB "
                f"({whose} memory line) + budget {BUDGET // MiB} MiB + 16 MB"),
        ]
        stored, garbage = p["stored_after"], p["garbage_after"]
    rows += [
        Row(f"backup {snapshots} of {snapshots}, {last['files'] or 0:,} files (whole command)",
            [last["wall"]], "s", None, None, "-",
            f"the day's changes only; peak RSS {last['rss'] / MB:,.0f} MB; the first backup "
            f"took {first['wall']:.1f} s"),
        Row(f"forget --keep-last {keep_last} (whole command)", [m["forget"]], "s", None, None,
            "-", f"snapshots the nodes list afterwards: {len(m['kept'])}"),
    ]
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
