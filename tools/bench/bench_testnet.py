"""A large testnet's start (issue 30): `flud testnet up --nodes 200` against
its target of 10 s, the node CPU that start costs, and idle node memory.

    .venv/bin/python tools/bench/bench_testnet.py [--quick] [--repeat N] [--big-nodes 200]

- the wall time of the whole command (fresh directory each time), until
  every node has joined the DHT (flud/testnet/query.py's joined()), and the
  part until every process listened (flud's own figure);
- node CPU: the sum of every node's cpu_seconds (STATS) asked right after
  `up` returned, total and per node: on two cores a 10 s start leaves at
  most ~0.1 s of CPU a node, whatever the launcher does;
- idle node RSS (STATS memory.rss, median and largest) --settle seconds
  later, target <= 40 MB (the issue's budget), with USS and PSS (forked
  nodes share the launcher's pages).

The machine is shared: the noise line says how much CPU other people's
processes took meanwhile (a busy machine lengthens every start).
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, Row, Testnet, log  # noqa: E402

NAME = "bench_testnet"
TARGET_SECONDS = 10.0
RSS_BUDGET_MB = 40.0


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_testnet")
    g.add_argument("--big-nodes", type=int, default=None,
                   help="nodes of the testnet started (200; 50 with --quick)")
    g.add_argument("--idle-settle", type=float, default=None,
                   help="seconds between `up` and the idle RSS sample (5)")


def run(args) -> list:
    nodes = args.big_nodes or (50 if args.quick else 200)
    settle = args.idle_settle if args.idle_settle is not None else 5.0
    base = os.path.join(common.RUN_DIR, "testnet")
    walls, ready, cpu_total, cpu_node, rss, rss_max, uss, pss = ([] for _ in range(8))
    for i in range(args.repeat):
        tn = Testnet(os.path.join(base, f"tn{i}"), nodes, timeout=120,
                     noise=getattr(args, "noise", None))
        try:
            log(f"bench_testnet: testnet up --nodes {nodes} ({i + 1}/{args.repeat})")
            tn.up()
            walls.append(tn.up_result.wall)
            m = re.search(r"processes ready in ([\d.]+) s", tn.up_result.stdout)
            ready.append(float(m.group(1)) if m else None)
            stats = [s for s in tn.stats() if s]
            cpu = [s["cpu_seconds"] for s in stats]
            cpu_total.append(sum(cpu))
            cpu_node.append(statistics.median(cpu))
            time.sleep(settle)
            stats = [s for s in tn.stats() if s]
            sizes = [s["memory"]["rss"] / MB for s in stats]
            rss.append(statistics.median(sizes))
            rss_max.append(max(sizes))
            u, p = common.uss_pss(tn.pids())
            if u:
                uss.append(u / MB)
                pss.append(p / MB)
        finally:
            tn.down()
            tn.remove()
    return [
        Row(f"testnet up --nodes {nodes} (every node joined)", walls, "s", TARGET_SECONDS, "<=",
            "before: 47.7 s (57.1 s full view)",
            f"wall time of the command; processes listening after "
            f"{common.fmt(common.median(ready))} s"),
        Row(f"node CPU to start {nodes} nodes (sum)", cpu_total, "s", None, None, "-",
            f"median per node {common.fmt(common.median(cpu_node))} s (STATS cpu_seconds "
            f"right after up; two cores give 20 s of CPU in 10 s)"),
        Row(f"idle node RSS, {nodes}-node testnet (median)", rss, "MB", RSS_BUDGET_MB, "<=",
            "before: 34.8 MB",
            f"{settle:.0f} s after up; largest {common.fmt(common.median(rss_max))} MB; "
            f"USS {common.fmt(common.median(uss))} MB, PSS {common.fmt(common.median(pss))} MB"),
    ]


if __name__ == "__main__":
    sys.exit(common.bench_main(NAME, add_arguments, run, __doc__))
