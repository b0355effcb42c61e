"""Bytes on the nodes over 30 simulated days of daily backups, with a retention policy and
without (issue 19's figures).

    .venv/bin/python tools/bench/bench_retention.py [--quick] [--nodes N]
        [--retention-files N] [--retention-bytes B] [--retention-days D]
        [--retention-seed S] [--max-unused P]

- The tree: gen_tree.py (default 20,000 files, 400 MB; --quick: 1,000 files, 20 MB), made
  once under run/bench/data and kept; each run backs up its own copy, changed each day by
  gen_tree.mutate (a tenth of the files changed or added, 1% removed).
- Two runs, one after the other, each on a fresh testnet (50 nodes; 10 with --quick) and a
  fresh client home: day 1 backs up the tree, every later day mutates it and backs it up
  again, at FLUD_NOW = that day (no sleeping). With the policy, each backup is followed by
  `flud forget --keep-daily 7 --keep-weekly 4 --prune --grace 0`; without it, nothing is
  ever forgotten or pruned. After each day: the bytes the nodes hold (the sum of their
  STATS bytes_stored).
- Day 30 with the policy, once the nodes had their time to compact (up to 70 s): what the
  kept snapshots reach as prune counts it (`flud prune --dry-run`: files and records,
  each once), and the figures of tests/integration/test_retention.py: (bytes on the
  nodes - archive garbage) / (n/k x that) <= 1.25, archive garbage <= 0.25 x the rest;
  and bytes on the nodes / (n/k x the unique compressed bytes of the kept snapshots'
  files: tools/snapshot_json.py per snapshot, each content's stored length once) <= 1.25.
Outputs: out/bench_retention.txt (figures and the day-by-day table),
out/bench_retention_days.json, out/bench_retention.png (matplotlib; without it, the
table alone). Takes ~5 min with --quick; the full run is hours (60 backups of 400 MB).
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

NAME = "bench_retention"
POLICY = ("--keep-daily", "7", "--keep-weekly", "4")
TARGET_RATIO = 1.25  # issue 19: bytes on the nodes <= 1.25 x n/k x unique bytes reached
QUICK_NODES = 10
BUDGET = 64 * MiB  # flud's default --memory-budget
RSS_SLACK = 16 * MB  # issue 19: prune's peak RSS within static + budget + 16 MB


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_retention")
    g.add_argument("--retention-files", type=int, default=None, metavar="N",
                   help="files in the generated tree (default 20000; 1000 with --quick)")
    g.add_argument("--retention-bytes", type=parse_bytes, default=None, metavar="B",
                   help="bytes in the generated tree (default 400M; 20M with --quick)")
    g.add_argument("--retention-days", type=int, default=30, metavar="D",
                   help="simulated days (default 30)")
    g.add_argument("--retention-seed", type=int, default=1, metavar="S",
                   help="generator and mutation seed (default 1)")
    g.add_argument("--max-unused", type=int, default=None, metavar="P",
                   help="forget --prune's --max-unused (default: the client's own)")


def run(args) -> list:
    files = args.retention_files or (1000 if args.quick else 20_000)
    nbytes = args.retention_bytes or (20 * 10**6 if args.quick else 400 * 10**6)
    # --quick runs on 10 nodes (common.resolve_common gives 12 when --nodes is not given)
    nodes = QUICK_NODES if args.quick and args.nodes == 12 else args.nodes
    days, seed = args.retention_days, args.retention_seed
    base = os.path.join(common.RUN_DIR, "retention")
    source, summary = simdays.kept_tree(files, nbytes, seed)
    unused = ["--max-unused", str(args.max_unused)] if args.max_unused is not None else []
    forget = ["forget", *POLICY, "--prune", "--grace", "0", *unused]
    runs = {}
    try:
        for policy in (True, False):
            runs[policy] = _days(args, base, source, nodes, days, seed,
                                 forget if policy else None, unused)
        rows = _rows(runs, summary, days, forget)
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows = [Row(f"{NAME} failed", [], note=str(err)[:300])]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    title = (f"{NAME}: {summary['files']:,} files, {summary['bytes'] / MB:,.0f} MB, seed {seed}; "
             f"{days} days; {nodes}-node testnet; policy `{' '.join(forget)}`")
    _write(rows, runs, title)
    return rows


def _days(args, base, source, nodes, days, seed, forget, unused) -> dict:
    """One run of `days` daily backups on a fresh testnet and home: bytes after each day.
    With the policy, also what the kept snapshots reach at the end: as prune counts it
    (files and records, each once; a dry run) and their files alone (snapshot_json)."""
    label = "policy" if forget else "nopolicy"
    tree = simdays.copy_tree(source, os.path.join(base, label, "home"))
    tn = Testnet(os.path.join(base, label, "tn"), nodes, noise=getattr(args, "noise", None))
    out = {"stored": [], "garbage": [], "backup_s": [], "forget_s": [], "freed": [],
           "reached": [], "rss": [], "static": []}
    try:
        tn.up()
        home = common.new_home(os.path.join(base, label, "client"), tn.dir)
        cfg = common.home_config(home)
        out.update(k=cfg["k"], n=cfg["n"])
        for day in range(1, days + 1):
            if day > 1:
                mutate(tree, seed, day)
            env = simdays.env_at(day)
            r = common.flud("backup", tree, "--home", home, env=env, timeout=simdays.TIMEOUT)
            if r.rc not in (0, 1):  # 1: some files skipped (a file removed while read)
                r.check(f"flud backup, day {day}")
            out["backup_s"].append(r.wall)
            if forget:
                r = common.flud(*forget, "--home", home, "--json", env=env,
                                timeout=simdays.TIMEOUT)
                r.check(f"flud forget --prune, day {day}")
                p = simdays.parse_prune(r.stdout)
                out["forget_s"].append(r.wall)
                out["freed"].append(p.get("freed"))
                out["reached"].append(p.get("reached"))
                out["rss"].append(r.maxrss)
                out["static"].append(p.get("static_rss"))
            stored, garbage = simdays.node_bytes(tn)
            out["stored"].append(stored)
            out["garbage"].append(garbage)
            log(f"{NAME} ({label}) day {day}/{days}: {out['stored'][-1] / MB:,.1f} MB on the "
                f"nodes; backup {out['backup_s'][-1]:.1f} s"
                + (f", forget --prune {out['forget_s'][-1]:.1f} s" if forget else ""))
        if forget:
            r = common.flud("prune", "--home", home, "--dry-run", "--grace", "0", "--json",
                            *unused,
                            env=simdays.env_at(days), timeout=simdays.TIMEOUT)
            out["final_reach"] = simdays.parse_prune(r.check("flud prune --dry-run").stdout)
            out["settled"] = simdays.settled_bytes(tn)
            out["kept"] = simdays.remote_snapshots(home, simdays.env_at(days, 2))
            log(f"{NAME}: kept snapshots {out['kept']}; reading what they reach")
            out["unique"] = simdays.unique_stored_bytes(home, out["kept"])
    finally:
        tn.down()
        tn.remove()
    return out


def _rows(runs, summary, days, forget) -> list:
    kept_run, all_run = runs[True], runs[False]
    k, n = kept_run["k"], kept_run["n"]
    stored, garbage = kept_run["settled"]
    live, never = stored - garbage, all_run["stored"][-1]
    reach = kept_run["final_reach"]
    reached = n / k * (reach.get("reached") or 0)
    files_only = n / k * kept_run["unique"]
    static = common.median(kept_run["static"])
    rss_bound = (static + BUDGET + RSS_SLACK) / MB if static else None
    return [
        Row(f"bytes on the nodes at day {days}, with the policy", [stored / MB], "MB", None,
            None, "-", f"{len(kept_run['kept'])} snapshots kept {kept_run['kept']}; once the "
                       f"nodes had their time to compact (right after the last prune: "
                       f"{kept_run['stored'][-1] / MB:,.1f} MB, of it archive garbage "
                       f"{kept_run['garbage'][-1] / MB:,.1f} MB)"),
        Row(f"bytes on the nodes at day {days}, without forget or prune", [never / MB], "MB",
            None, None, "-", f"{days} snapshots; with the policy the nodes hold "
                             f"{stored / never:.2f}x of this"),
        Row(f"day {days}: (bytes on the nodes - archive garbage) / (n/k x what the kept "
            f"snapshots reach)", [live / reached if reached else None], "", TARGET_RATIO, "<=",
            "-", f"as prune counts it (its dry run: files and records, each once; "
                 f"{common.fmt(reach.get('reach_bundles', 0) / MB)} MB live in bundles of "
                 f"{common.fmt(reach.get('reached_bundle_bytes', 0) / MB)} MB, "
                 f"{reach.get('mostly_dead_bundles')} bundles past --max-unused, "
                 f"{common.fmt(reach.get('reach_extents', 0) / MB)} MB in extents), x n/k = "
                 f"{n}/{k}: {reached / MB:,.1f} MB; target: issue 19's 1.25, as "
                 f"tests/integration/test_retention.py asserts it"),
        Row(f"day {days}: archive garbage / live bytes on the nodes",
            [garbage / live if live else None], "", 0.25, "<=", "-",
            f"members deleted from a node's archive keep their bytes until it is compacted "
            f"(at a fifth of the archive): {garbage / MB:,.1f} MB; target: the test's"),
        Row(f"day {days}: bytes on the nodes / (n/k x unique bytes of the kept snapshots' files)",
            [stored / files_only if files_only else None], "", TARGET_RATIO, "<=", "-",
            f"garbage included, records not counted: each content's stored length once "
            f"(tools/snapshot_json.py per kept snapshot) {kept_run['unique'] / MB:,.1f} MB, "
            f"x n/k: {files_only / MB:,.1f} MB"),
        Row("daily backup (whole command), with the policy", kept_run["backup_s"], "s", None,
            None, "-", f"median of {days}; without the policy "
                       f"{common.fmt(common.median(all_run['backup_s']))} s"),
        Row(f"daily `{' '.join(forget)}` (whole command)", kept_run["forget_s"], "s", None,
            None, "-", f"median of {days}; prune said it freed "
                       f"{sum(f or 0 for f in kept_run['freed']) / MB:,.1f} MB in all"),
        Row(f"peak RSS, daily forget --prune (highest of {days})", [max(kept_run["rss"]) / MB],
            "MB", rss_bound, "<=" if rss_bound else None, "-",
            f"wait4 ru_maxrss; target: static {common.fmt(static and static / MB)} MB (prune's "
            f"memory line) + budget {BUDGET // MiB} MiB + 16 MB"),
        Row(f"generated tree: {summary['files']:,} files, {summary['bytes'] / MB:,.0f} MB",
            [summary["elapsed_s"]], "s", None, None, "-",
            f"seed {summary['seed']}; ~{summary['ratio'] or 0:.2f}x with "
            f"{summary['compressor']}; the figure is the time it took to generate (kept "
            f"from an earlier run if it exists)"),
    ]


def day_table(runs) -> str:
    """Day; MB with the policy, of it archive garbage, and n/k x what the kept snapshots
    reach as that day's prune counted it; MB without the policy."""
    policy, without = runs.get(True, {}), runs.get(False, {}).get("stored", [])
    with_policy, garbage = policy.get("stored", []), policy.get("garbage", [])
    share = policy.get("n", 1) / policy.get("k", 1)
    reached = [r and r * share for r in policy.get("reached", [])]

    def at(values, i):
        return values[i] / MB if i < len(values) and values[i] is not None else None
    head = ("day", "MB with policy", "of it garbage", "n/k x reached", "MB without", "ratio")
    lines = ["  ".join(f"{h:>{max(len(h), 3)}}" for h in head)]
    for i in range(max(len(with_policy), len(without))):
        a, b = at(with_policy, i), at(without, i)
        cells = (str(i + 1), common.fmt(a), common.fmt(at(garbage, i)),
                 common.fmt(at(reached, i)), common.fmt(b), f"{a / b:.2f}" if a and b else "-")
        lines.append("  ".join(f"{c:>{max(len(h), 3)}}" for c, h in zip(cells, head)))
    return "\n".join(lines)


def _write(rows, runs, title) -> None:
    os.makedirs(common.OUT_DIR, exist_ok=True)
    plotted = _plot(runs, os.path.join(common.OUT_DIR, f"{NAME}.png"), title)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=title, out=f)
        print("\nbytes on the nodes after each day (sum of the nodes' STATS bytes_stored; "
              "garbage: deleted archive members not yet compacted away; reached: files and "
              "records the kept snapshots reach, as that day's prune counted them):", file=f)
        print(day_table(runs), file=f)
        if not plotted:
            print("\n(no plot: matplotlib is missing)", file=f)
    common.save_json(os.path.join(common.OUT_DIR, f"{NAME}_days.json"),
                     {"title": title, "with_policy": runs.get(True),
                      "without_policy": runs.get(False)})


def _plot(runs, path, title) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"{NAME}: matplotlib missing, the table alone")
        return False
    fig, ax = plt.subplots(figsize=(9, 4.8))
    try:
        for policy, label, style in ((True, "forget --keep-daily 7 --keep-weekly 4 --prune",
                                      "o-"), (False, "no forget, no prune", "s--")):
            stored = runs.get(policy, {}).get("stored", [])
            ax.plot(range(1, len(stored) + 1), [b / MB for b in stored], style, label=label,
                    markersize=3)
        policy = runs.get(True, {})
        share = policy.get("n", 1) / policy.get("k", 1)
        reached = [(i + 1, r * share / MB) for i, r in enumerate(policy.get("reached", [])) if r]
        if reached:
            ax.plot(*zip(*reached), ":", color="grey",
                    label="n/k x what the kept snapshots reach (prune's count)")
        ax.set_xlabel("simulated day")
        ax.set_ylabel("bytes on the nodes (MB)")
        ax.set_title(title, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return True


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
