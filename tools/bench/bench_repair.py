#!/usr/bin/env python3
"""Repair throughput (issue 20): a node holding ~1 GB of one user's shares is lost for good.

    .venv/bin/python tools/bench/bench_repair.py [--quick] [--nodes 50]
                                                 [--data-bytes B] [--file-bytes B]

- The data: large files of random bytes (--file-bytes each, default 256 MiB; 32 MiB with
  --quick), made once under run/bench/data and kept. By default sized so that a node
  holds about 1 GB of this user's shares: with k-of-n coding every byte is stored
  n/k times, spread over the testnet's nodes, so a node holds on average
  data x (n/k) / nodes; 1 GB a node on 50 nodes at 4-of-8 is 1 GB x 50 x 4/8 = 25 GB
  of data (the busiest node holds more than the average, ~1.1-1.2x). --quick: 160 MB
  on 12 nodes (~27 MB a node). --data-bytes and --nodes scale it. Disk: the data, n/k
  times it on the nodes and a restore of it (the bench refuses when short): ~100 GB
  for the 50-node default; --nodes 20 (10 GB of data, still ~1 GB a node) ~42 GB.
- Back it up from a fresh home, read every node's STATS (one user stores here: a
  node's bytes_stored is this user's bytes) and SIGKILL, for good, the node that
  holds the most (never node 0: clients ask it for the member list).
- `flud check --repair --unreachable-grace 0 --repair-below n --json` until a run finds
  nothing degraded or lost (at most MAX_RUNS), then once more to confirm all healthy.
  --repair-below n: full redundancy is every object back to n shares; the default
  threshold (n-1) would wait for a second lost share and repair nothing here.
  Figures: time to restore full redundancy (the kill to the end of the repairing
  runs, whole commands), MB/s of re-created shares over that time (target >= 100),
  bytes fetched to re-create them, and the check's peak RSS (wait4 ru_maxrss)
  against static + 64 MiB budget + 16 MB (static: the check's own memory line).
- A restore from the repaired holders, compared byte for byte with the source
  (tools/treecmp.py).
Table: out/bench_repair.txt (and out/bench_repair.json).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402

from flud.client.home import DEFAULTS as HOME_DEFAULTS  # noqa: E402
from flud.testnet import launch  # noqa: E402

NAME = "bench_repair"
PER_NODE = 1e9             # issue 20: the lost node holds about 1 GB of this user's shares
QUICK_DATA = 160 * MB
BUDGET = 64 * MiB          # the client's default memory budget
RSS_SLACK = 16 * MB
TARGET_RATE = 100.0        # MB/s of re-created shares
MAX_RUNS = 5               # check runs before the bench gives up on full redundancy
TIMEOUT = 6 * 3600
DISK_SLACK = 2 * 1e9       # free space kept beyond the estimate


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_repair")
    g.add_argument("--data-bytes", dest="repair_data_bytes", type=float, default=None,
                   metavar="B", help="bytes backed up (default: 1 GB x nodes x k/n, i.e. "
                                     "25e9 on 50 nodes at 4-of-8; 160e6 with --quick)")
    g.add_argument("--file-bytes", dest="repair_file_bytes", type=float, default=None,
                   metavar="B", help="size of each generated file (default 256 MiB; "
                                     "32 MiB with --quick)")


def default_data_bytes(nodes: int, k: int, n: int) -> int:
    """Data that puts PER_NODE of shares on the average node: data x (n/k) / nodes."""
    return int(PER_NODE * nodes * k / n)


def run(args) -> list:
    base = os.path.join(common.RUN_DIR, "repair")
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    rows, title = [], f"{NAME}: not run"
    k, n = HOME_DEFAULTS["k"], HOME_DEFAULTS["n"]   # what `flud init` gives the home
    try:
        nbytes = int(args.repair_data_bytes or
                     (QUICK_DATA if args.quick else default_data_bytes(args.nodes, k, n)))
        file_bytes = int(args.repair_file_bytes or (32 * MiB if args.quick else 256 * MiB))
        title = (f"{NAME}: {nbytes / MB:,.0f} MB in {file_bytes / MiB:,.0f} MiB files, "
                 f"{k}-of-{n}, {args.nodes}-node testnet (a node holds ~"
                 f"{nbytes * n / k / args.nodes / MB:,.0f} MB on average)")
        log(title)
        data = _data(nbytes, file_bytes, n / k)
        tn.up()
        home = common.new_home(os.path.join(base, "home"), tn.dir)
        rows = _measure(tn, base, home, data, nbytes, n)
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows.append(Row(f"{NAME} failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    common.save_table(NAME, rows, title)
    return rows


def _data(nbytes: int, file_bytes: int, expansion: float) -> str:
    """The files, kept between runs; refuses when the disk cannot hold the
    data, its n/k shares on the nodes and a restore of it."""
    path = os.path.join(common.RUN_DIR, "data", f"repair-{nbytes}-{file_bytes}")
    have = common.tree_size(path)[1] if os.path.isdir(path) else 0
    need = (nbytes - have) + nbytes * expansion + nbytes + DISK_SLACK
    free = shutil.disk_usage(common.RUN_DIR if os.path.isdir(common.RUN_DIR) else
                             common.ROOT).free
    if need > free:
        raise common.BenchError(
            f"{nbytes / 1e9:.1f} GB of data needs ~{need / 1e9:.0f} GB free (data, x{expansion:g} "
            f"on the nodes, a restore), {free / 1e9:.0f} GB is: give a smaller --data-bytes "
            f"or fewer --nodes (the default data follows the node count)")
    left, i = nbytes, 0
    while left > 0:
        size = min(file_bytes, left)
        common.random_file(os.path.join(path, f"file{i:04d}.bin"), size)
        left -= size
        i += 1
    return path


def _by_node(tn) -> list:
    """[(bytes stored, node)] of the nodes that answered, fewest bytes first."""
    stats = tn.stats()
    return sorted(((s["store"]["bytes_stored"], node) for s, node in zip(stats, tn.nodes) if s),
                  key=lambda pair: pair[0])


def _check(home: str, n: int) -> dict:
    r = common.flud("check", "--home", home, "--repair", "--unreachable-grace", "0",
                    "--repair-below", n, "--json", timeout=TIMEOUT)
    try:
        summary = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise common.BenchError(f"flud check exited {r.rc} without its JSON summary:\n"
                                f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    static = common.memory_of(summary).get("static_rss")
    counts = summary["counts"]
    log(f"{NAME}: check {r.wall:.1f} s, exit {r.rc}: {counts}; re-created "
        f"{summary['recreated']['shares']} shares, {summary['recreated']['bytes'] / MB:,.1f} MB;"
        f" fetched {summary['fetched_bytes'] / MB:,.1f} MB; peak RSS {r.maxrss / MB:.0f} MB")
    return {"summary": summary, "wall": r.wall, "cpu": r.cpu, "rss": r.maxrss, "static": static,
            "troubled": counts["degraded"] + counts["lost"]}


def _measure(tn, base, home, data, nbytes, n) -> list:
    log(f"{NAME}: backup of {nbytes / MB:,.0f} MB")
    backup = common.flud("backup", data, "--home", home, timeout=TIMEOUT).check("flud backup")
    ranked = _by_node(tn)
    candidates = [(b, node) for b, node in ranked if node is not tn.nodes[0]]
    if not candidates:
        raise common.BenchError("no node but node 0 answered STATS")
    held, victim = candidates[-1]
    total = sum(b for b, _ in ranked)
    log(f"{NAME}: stopping node {victim['node_id'][:12]} (pid {victim['pid']}) for good: it "
        f"holds {held / MB:,.1f} MB of {total / MB:,.1f} MB (mean "
        f"{total / len(ranked) / MB:,.1f} MB a node)")
    launch.signal_all([(victim["pid"], victim.get("start"))], signal.SIGKILL)
    if launch.wait_gone([(victim["pid"], victim.get("start"))], timeout=10):
        raise common.BenchError(f"node pid {victim['pid']} outlived SIGKILL")
    killed_at = time.monotonic()
    runs = []
    while len(runs) < MAX_RUNS:
        runs.append(_check(home, n))
        if runs[-1]["troubled"] == 0:
            break
    restored_after = time.monotonic() - killed_at
    if runs[-1]["troubled"]:
        raise common.BenchError(f"still {runs[-1]['troubled']} objects degraded or lost after "
                                f"{MAX_RUNS} check runs: {runs[-1]['summary']['counts']}")
    confirm = _check(home, n)
    recreated = sum(r["summary"]["recreated"]["bytes"] for r in runs)
    shares = sum(r["summary"]["recreated"]["shares"] for r in runs)
    fetched = sum(r["summary"]["fetched_bytes"] for r in runs)
    repaired = sum(r["summary"]["counts"]["repaired"] for r in runs)
    check_wall = sum(r["wall"] for r in runs)
    static = common.median([r["static"] for r in runs])
    rss_bound = (static + BUDGET + RSS_SLACK) / MB if static else None
    peak = max(r["rss"] for r in runs)
    after = sum(b for b, _ in _by_node(tn))

    dest = os.path.join(base, "restored")
    shutil.rmtree(dest, ignore_errors=True)
    log(f"{NAME}: restore from the repaired holders")
    restore = common.flud("restore", "--home", home, "--to", dest, timeout=TIMEOUT)
    restore.check("flud restore after the repair")
    from tools.treecmp import compare_trees
    problems = compare_trees(data, os.path.join(dest, os.path.basename(data)))
    shutil.rmtree(dest, ignore_errors=True)

    rate = recreated / MB / restored_after if restored_after else None
    walls = ", ".join(f"{r['wall']:.1f}" for r in runs)
    same = "identical to the source" if not problems else \
        f"{len(problems)} DIFFERENCES, e.g. {problems[:3]}"
    return [
        Row(f"backup of {nbytes / MB:,.0f} MB (whole command)", [backup.wall], "s", None, None,
            "-", f"{total / MB:,.0f} MB stored on {len(ranked)} nodes; the lost node held "
                 f"{held / MB:,.1f} MB ({held / (total / len(ranked)):.2f}x the mean)"),
        Row("time to restore full redundancy after losing the busiest node", [restored_after],
            "s", None, None, "-",
            f"SIGKILL to the end of the last repairing check; {len(runs)} check run(s) of "
            f"{walls} s (whole commands, {check_wall:.1f} s); {repaired} objects repaired; "
            f"the next check: {confirm['summary']['counts']}"),
        Row("re-created shares per second", [rate], "MB/s", TARGET_RATE, ">=", "-",
            f"{recreated / MB:,.1f} MB in {shares:,} shares over the time above "
            f"({recreated / held:.2f}x what the lost node held); stored after the repair "
            f"{after / MB:,.0f} MB"),
        Row("bytes fetched to re-create them", [fetched / MB], "MB", None, None, "-",
            f"{fetched / recreated:.2f} bytes fetched per byte re-created" if recreated else ""),
        Row("peak RSS of the check (repair)", [peak / MB], "MB", rss_bound,
            "<=" if rss_bound else None, "-",
            f"wait4 ru_maxrss, the largest of the repairing runs; target: static "
            f"{common.fmt((static or 0) / MB)} MB + budget {BUDGET // MiB} MiB + 16 MB; "
            f"check CPU {sum(r['cpu'] for r in runs):.1f} s"),
        Row("restore after the repair differs from the source (files)", [len(problems)], "",
            0, "<=", "-", f"restore {restore.wall:.1f} s; {same}"),
    ]


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
