#!/usr/bin/env python3
"""flud's benchmark suite: every figure of issues 2-6, 16 and 18-20 in one table (`make bench`).

    .venv/bin/python tools/bench/run_all.py [--quick] [--repeat N] [--only NAME[,NAME]]

NAME: node, backup, small, memory, checkload, faults, hostile, tree, repair,
check, retention, prune, excludes, restore, cdc, vs_restic, testnet, fixed (bench_*.py in this directory; each also runs on its
own). --quick: small sizes and 1 repetition, a smoke test only. Prints ONE
table: figure | measured (median of N) | target | anchor | ok, with notes,
and how much CPU other people's processes took while each part ran (the
machine is shared: a busy machine lowers every rate).
Results: tools/bench/out/results.json (plus the plots and side tables that
the parts write to tools/bench/out/).
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row, log  # noqa: E402

BENCHES = [("node", "bench_node"), ("backup", "bench_backup"), ("small", "bench_small"),
           ("memory", "bench_memory"), ("checkload", "bench_checkload"),
           ("faults", "bench_faults"), ("hostile", "bench_hostile"), ("tree", "bench_tree"),
           ("repair", "bench_repair"), ("check", "bench_check"),
           ("retention", "bench_retention"), ("prune", "bench_prune"),
           ("excludes", "bench_excludes"), ("restore", "bench_restore"),
           ("cdc", "bench_cdc"), ("vs_restic", "bench_vs_restic"), ("testnet", "bench_testnet"),
           ("fixed", "bench_fixed")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--only", default=None,
                        help="comma list of: " + ", ".join(n for n, _ in BENCHES))
    modules = {name: importlib.import_module(mod) for name, mod in BENCHES}
    for name, _ in BENCHES:
        modules[name].add_arguments(parser)
    args = parser.parse_args()
    common.resolve_common(args)
    chosen = [n for n, _ in BENCHES]
    if args.only:
        chosen = [n.strip().removeprefix("bench_") for n in args.only.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in modules]
        if unknown:
            parser.error(f"unknown bench {unknown}; choose from {[n for n, _ in BENCHES]}")

    started = time.time()
    all_rows, noise, failures = [], {}, []
    for name in chosen:
        log(f"== {name} ==")
        t0 = time.monotonic()
        with common.NoiseMeter() as meter:
            args.noise = meter
            try:
                rows = modules[name].run(args)
            except Exception as err:  # one part failing must not hide the others
                traceback.print_exc()
                failures.append(name)
                rows = [Row(f"{name}: failed", [], note=f"{type(err).__name__}: {err}"[:300])]
            finally:
                del args.noise
        for r in rows:
            r.bench = r.bench or name
        all_rows += rows
        noise[name] = meter.result
        log(f"== {name} done in {time.monotonic() - t0:.0f} s; {meter.text()}")
        _save(args, all_rows, noise, started, chosen, partial=True)

    print()
    title = (f"flud benchmarks ({'quick smoke test' if args.quick else 'full'}; "
             f"{args.nodes}-node testnet; medians of {args.repeat}; "
             f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)")
    _print_grouped(all_rows, title)
    print("\nnoise (CPU of other processes on this shared machine while each part ran):")
    for name, r in noise.items():
        print(f"  {name:10} {r['wall_s']:6.0f} s  machine busy {r['machine_busy_cores']:.2f} "
              f"of {r['cpus']} cores: ours {r['ours_cores']:.2f}, others "
              f"{r['others_cores']:.2f}; load avg {r['loadavg_start']} -> {r['loadavg_end']}")
    misses = [r for r in all_rows if r.ok is False]
    print(f"\n{sum(1 for r in all_rows if r.ok)} ok, {len(misses)} below target, "
          f"{sum(1 for r in all_rows if r.ok is None)} reported without target; "
          f"total {time.time() - started:.0f} s")
    state = _git_state()
    print(f"code measured: {state['head']}" + (
        f" plus uncommitted changes to {', '.join(state['uncommitted_product_files'])}"
        if state["uncommitted_product_files"] else " (clean)"))
    path = _save(args, all_rows, noise, started, chosen, partial=False)
    print(f"results: {os.path.relpath(path, common.ROOT)}")
    return 1 if failures else 0


def _print_grouped(rows, title) -> None:
    """print_table, with one heading row per part."""
    grouped = []
    last = None
    for r in rows:
        if r.bench != last:
            grouped.append(Row(f"[{r.bench}]", None))
            last = r.bench
        grouped.append(r)
    # heading rows: no samples -> print blank cells
    for g in grouped:
        if g.samples is None:
            g.samples = []
            g.target_text = ""
            g._heading = True
    common.print_table(grouped, title, heading_rows=True)


def _git_state() -> dict:
    """Which product code was measured: HEAD and any uncommitted change to it
    (other developers edit the same working tree)."""
    import subprocess
    def git(*a):
        r = subprocess.run(["git", *a], cwd=common.ROOT, capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else ""
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "flud", "storage",
                                      "aggregator").splitlines() if len(line) > 3]
    return {"head": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted_product_files": dirty}


def _save(args, rows, noise, started, chosen, partial) -> str:
    path = os.path.join(common.OUT_DIR, "results.json")
    opts = {k: v for k, v in vars(args).items() if k != "noise"}
    common.save_json(path, {
        "tool": "tools/bench/run_all.py", "partial": partial,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1), "benches": chosen, "options": opts,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "code": _git_state(), "noise": noise, "rows": [r.as_dict() for r in rows]})
    return path


if __name__ == "__main__":
    sys.exit(main())
