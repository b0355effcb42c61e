#!/usr/bin/env python3
"""The cost of a weekly check cycle (issue 20): requests, bytes and CPU per GB backed up.

    .venv/bin/python tools/bench/bench_check.py [--quick] [--nodes 50] [--check-bytes B]

- The data: the seed's home mix (small files, packed in bundles; when
  shared/tools/gen_mix.py is there) and large files of random bytes (extents), default
  1 GB in all (64 MB with --quick), made once under run/bench/data and kept.
- Back it up from a fresh home, then run `flud check --json` with FLUD_NOW one
  simulated day apart: a first run (a check by hand with no state starts the cycle
  and covers all of it), then 7 daily runs, each of which takes the part of the
  rotation the day made due (rotation.plan_run): together one whole cycle, every
  share challenged once, plus one share of every holder node each run (so each
  run knows every node's reachability).
- Per run and for the 7 runs: requests the client sent (by operation) and
  transport bytes it sent and received, TLS included (tools/bench/count_client.py
  wraps the client's connections), client CPU (wait4), wall time and peak RSS;
  all divided by the GB backed up. Beside it, the nodes' STATS over the cycle: their
  CPU (less their idle CPU, measured before the cycle) and their VERIFY and RETRIEVE
  counters, a cross-check of the client's counts (the nodes' request and transport
  totals also hold their membership gossip, so the client's counts are the figures).
Table: out/bench_check.txt (and out/bench_check.json).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, Row, Testnet, log  # noqa: E402

NAME = "bench_check"
COUNT = os.path.join(common.HERE, "count_client.py")
DAY = 86400.0
DAYS = 7
FILE_BYTES = 64 * 10**6
TIMEOUT = 3600
GB = 1e9


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_check")
    g.add_argument("--check-bytes", type=float, default=None, metavar="B",
                   help="bytes backed up (default 1e9; 64e6 with --quick)")


def run(args) -> list:
    nbytes = int(args.check_bytes or (64e6 if args.quick else 1e9))
    base = os.path.join(common.RUN_DIR, "check")
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    rows, title = [], f"{NAME}: not run"
    try:
        data, files, total = _data(nbytes)
        title = (f"{NAME}: a weekly check cycle of {total / MB:,.0f} MB in {files:,} files; "
                 f"{args.nodes}-node testnet")
        tn.up()
        home = common.new_home(os.path.join(base, "home"), tn.dir)
        log(f"{NAME}: backup of {total / MB:,.0f} MB ({files} files)")
        common.flud("backup", data, "--home", home, timeout=TIMEOUT).check("flud backup")
        rows = _cycle(tn, base, home, total, idle=5.0 if args.quick else 15.0)
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows.append(Row(f"{NAME} failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=title, out=f)
    return rows


def _data(nbytes: int) -> tuple:
    """(path, files, bytes): the home mix (if there) and random large files."""
    path = os.path.join(common.RUN_DIR, "data", f"check-{nbytes}")
    mix = 0
    if common.have_gen_mix() and nbytes > 4 * common.MIX_TOTAL:
        common.gen_mix(os.path.join(path, "home"), seed=20)
        mix = common.tree_size(os.path.join(path, "home"))[1]
    left, i = nbytes - mix, 0
    while left > 0:
        size = min(FILE_BYTES, left)
        common.random_file(os.path.join(path, "large", f"file{i:03d}.bin"), size)
        left -= size
        i += 1
    files, total = common.tree_size(path)
    return path, files, total


def _node_totals(tn) -> dict:
    """The nodes' counters a check moves (gossip between nodes moves none of
    them but the CPU), summed over the nodes."""
    out = {"verifies": 0, "retrieves": 0, "bytes_retrieved_out": 0, "cpu": 0.0}
    for s in tn.stats():
        if s:
            server = s.get("server", {})
            for key in ("verifies", "retrieves", "bytes_retrieved_out"):
                out[key] += server.get(key, 0)
            out["cpu"] += s.get("cpu_seconds", 0.0)
    return out


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def _check(home: str, base: str, now: float, label: str) -> dict:
    counts = os.path.join(base, "counts.json")
    env = dict(os.environ, FLUD_NOW=f"{now:.0f}")
    r = common.run([common.PY, COUNT, counts, "--", "check", "--home", home, "--json"],
                   timeout=TIMEOUT, env=env)
    try:
        summary = json.loads(r.stdout.strip().splitlines()[-1])
        with open(counts) as f:
            wire = json.load(f)
    except (ValueError, IndexError, OSError):
        raise common.BenchError(f"flud check ({label}) exited {r.rc} without its summary:\n"
                                f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    if summary["counts"]["degraded"] or summary["counts"]["lost"]:
        raise common.BenchError(f"check ({label}) found trouble on a healthy testnet: "
                                f"{summary['counts']}")
    requests = sum(wire["requests"].values())
    log(f"{NAME}: {label}: window {summary['window']:.3f} of the cycle, "
        f"{summary['challenged']} challenged; {requests} requests {wire['requests']}, "
        f"{wire['bytes_out'] / 1e3:,.0f} kB out, {wire['bytes_in'] / 1e3:,.0f} kB in; "
        f"CPU {r.cpu:.2f} s, {r.wall:.2f} s, peak RSS {r.maxrss / MB:.0f} MB")
    return {"summary": summary, "wire": wire, "requests": requests, "wall": r.wall,
            "cpu": r.cpu, "rss": r.maxrss}


def _cycle(tn, base, home, total, idle: float) -> list:
    # The nodes' CPU while idle (gossip, sampling), to take out of theirs.
    t0, before = time.monotonic(), _node_totals(tn)
    time.sleep(idle)
    idle_cpu = _delta(_node_totals(tn), before)["cpu"] / (time.monotonic() - t0)
    start = float(int(time.time()))
    first = _check(home, base, start, "first run (no state: the whole cycle)")
    t0, before = time.monotonic(), _node_totals(tn)
    days = [_check(home, base, start + d * DAY, f"day {d}/{DAYS}") for d in range(1, DAYS + 1)]
    elapsed = time.monotonic() - t0
    nodes = _delta(_node_totals(tn), before)
    node_cpu = nodes["cpu"] - idle_cpu * elapsed
    gb = total / GB
    window = sum(d["summary"]["window"] for d in days)
    requests = sum(d["requests"] for d in days)
    by_op = {}
    for d in days:
        for op, count in d["wire"]["requests"].items():
            by_op[op] = by_op.get(op, 0) + count
    challenged = sum(d["summary"]["challenged"] for d in days)
    sent = sum(d["wire"]["bytes_out"] for d in days)
    received = sum(d["wire"]["bytes_in"] for d in days)
    cpu = sum(d["cpu"] for d in days)
    wall = sum(d["wall"] for d in days)
    per_run = ", ".join(str(d["requests"]) for d in days)
    return [
        Row("weekly check cycle: requests per GB backed up", [requests / gb], "/GB", None, None,
            "-", f"{requests:,} requests in {DAYS} daily runs ({per_run}), covering "
                 f"{window:.3f} of the cycle: {by_op}; {challenged:,} shares challenged; "
                 f"the first run (whole cycle) sent {first['requests']:,}"),
        Row("weekly check cycle: bytes sent per GB backed up", [sent / 1e3 / gb], "kB/GB",
            None, None, "-", f"{sent / 1e3:,.0f} kB in all; transport bytes, TLS included; "
                             f"first run {first['wire']['bytes_out'] / 1e3:,.0f} kB"),
        Row("weekly check cycle: bytes received per GB backed up", [received / 1e3 / gb],
            "kB/GB", None, None, "-",
            f"{received / 1e3:,.0f} kB in all; first run "
            f"{first['wire']['bytes_in'] / 1e3:,.0f} kB"),
        Row("weekly check cycle: client CPU per GB backed up", [cpu / gb], "s/GB", None, None,
            "-", f"{cpu:.2f} s of CPU (wait4, whole commands incl. start-up) in {wall:.1f} s "
                 f"wall; first run {first['cpu']:.2f} s; peak RSS "
                 f"{max(d['rss'] for d in days) / MB:.0f} MB"),
        Row("weekly check cycle: nodes' CPU per GB backed up (STATS deltas)",
            [node_cpu / gb], "s/GB", None, None, "-",
            f"{node_cpu:.2f} s over all nodes, their idle CPU ({idle_cpu:.2f} cores, measured "
            f"over {idle:.0f} s) taken out; the nodes counted {nodes['verifies']:,} VERIFY and "
            f"{nodes['retrieves']:,} RETRIEVE (the client sent {by_op.get('VERIFY', 0):,} and "
            f"{by_op.get('RETRIEVE', 0):,}), {nodes['bytes_retrieved_out'] / 1e3:,.0f} kB "
            f"retrieved"),
    ]


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
