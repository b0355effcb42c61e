"""check_load figures (issue 6), by running tools/check_load.py with --json.

    .venv/bin/python tools/bench/bench_checkload.py [--quick] [--repeat N]

- The seed's first experiment: exponential sizes with a 10 kB mean, 80%
  RETRIEVE / 20% STORE, on a fresh 50-node testnet: total ops/s (median of
  --repeat runs of --cl-duration seconds; --cl-clients processes x
  --cl-sessions sessions, one op in flight per session).
- Small-object (1 kB) RETRIEVE time to first byte, p99, at 1 and 64 sessions,
  and errors at 256 sessions: check_load's sweep mode (one cell per session
  count), median of --repeat sweeps.
Skipped, with a note, when tools/check_load.py is absent.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row, Testnet, log  # noqa: E402

NAME = "bench_checkload"
TOOL = os.path.join(common.ROOT, "tools", "check_load.py")


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_checkload")
    g.add_argument("--cl-duration", type=float, default=None, help="seconds per mix run (10)")
    g.add_argument("--cl-clients", type=int, default=2, help="client processes (2)")
    g.add_argument("--cl-sessions", type=int, default=8, help="sessions per client (8)")
    g.add_argument("--cl-cell", type=float, default=None, help="seconds per sweep cell (5)")


def run(args) -> list:
    mix_row = Row("check_load 10 kB-mean 80/20 mix", [], "ops/s", 1000, ">=",
                  "seed's 2007 grid: ~1.25 ops/s")
    t1 = Row("1 kB RETRIEVE TTFB p99, 1 session", [], "ms", 5, "<=", "CORTX: 27 ms")
    t64 = Row("1 kB RETRIEVE TTFB p99, 64 sessions", [], "ms", 50, "<=", "CORTX: 124 ms")
    e256 = Row("errors up to 256 sessions (1 kB RETRIEVE)", [], "", 0, "<=", "-")
    rows = [mix_row, t1, t64, e256]
    if not os.path.exists(TOOL):
        for r in rows:
            r.note = "skipped: tools/check_load.py is absent"
        return rows
    duration = args.cl_duration or (4.0 if args.quick else 10.0)
    cell = args.cl_cell or (2.0 if args.quick else 5.0)
    base = os.path.join(common.RUN_DIR, "checkload")
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    mix_notes, sweep_notes = [], []
    try:
        tn.up()
        for i in range(args.repeat):
            log(f"bench_checkload: 10 kB-mean 80/20 mix, {duration:.0f} s ({i + 1}/{args.repeat})")
            out = os.path.join(common.OUT_DIR, "check_load_mix.json")
            r = common.run([common.PY, TOOL, "--testnet", tn.dir, "--clients",
                            str(args.cl_clients), "--sessions", str(args.cl_sessions),
                            "--mix", "retrieve=80,store=20", "--size", "exp:10k",
                            "--duration", str(duration), "--seed", str(1 + i),
                            "--interval", str(int(duration) + 60), "--json", out],
                           timeout=duration + 300)
            if r.rc != 0 or not os.path.exists(out):
                mix_notes.append(f"run {i + 1} failed ({r.rc}): {r.stderr[-300:]}")
                continue
            with open(out) as f:
                doc = json.load(f)
            total = doc["total"]
            mix_row.samples.append(total["ops_per_s"])
            ops = doc.get("ops", {})
            mix_notes.append(
                f"{total['ops']} ops, {total['errors']} errors, retrieve p99 "
                f"{1e3 * ops.get('retrieve', {}).get('latency_s', {}).get('p99', 0):.1f} ms, "
                f"store p99 {1e3 * ops.get('store', {}).get('latency_s', {}).get('p99', 0):.1f} ms")
        for i in range(args.repeat):
            log(f"bench_checkload: sweep 1 kB x 1,64,256 sessions ({i + 1}/{args.repeat})")
            out = os.path.join(common.OUT_DIR, "check_load_sweep.json")
            r = common.run([common.PY, TOOL, "--testnet", tn.dir, "--sweep", "--sweep-sizes",
                            "1KB", "--sweep-sessions", "1,64,256", "--cell-duration", str(cell),
                            "--clients", str(args.cl_clients), "--seed", str(1 + i),
                            "--json", out], timeout=600)
            if r.rc != 0 or not os.path.exists(out):
                sweep_notes.append(f"sweep {i + 1} failed ({r.rc}): {r.stderr[-300:]}")
                continue
            with open(out) as f:
                doc = json.load(f)
            cells = {c["sessions"]: c for c in doc.get("cells", []) if c.get("size") == 1000}
            if 1 in cells:
                t1.samples.append(1e3 * cells[1]["ttfb_p99_s"])
            if 64 in cells:
                t64.samples.append(1e3 * cells[64]["ttfb_p99_s"])
            if 256 in cells:
                e256.samples.append(sum(cells[s].get("errors", 0) for s in cells))
            sweep_notes.append(", ".join(
                f"{s} sessions: TTFB avg {1e3 * c['ttfb_avg_s']:.2f} ms, p99 "
                f"{1e3 * c['ttfb_p99_s']:.2f} ms, {c['rps']:.0f} RPS, {c.get('errors', 0)} "
                f"errors" for s, c in sorted(cells.items())))
    except common.BenchError as err:
        mix_notes.append(str(err)[:300])
    finally:
        tn.down()
        tn.remove()
    mix_row.note = (f"{args.cl_clients} client processes x {args.cl_sessions} sessions, "
                    f"{duration:.0f} s per run; last: " + (mix_notes[-1] if mix_notes else "-"))
    sweep = sweep_notes[-1] if sweep_notes else "-"
    t1.note = f"check_load --sweep, {cell:.0f} s per cell; last sweep: {sweep}"
    t64.note = f"same sweep, sessions over {args.cl_clients} client processes"
    e256.note = "sum of errors over the 1, 64 and 256-session cells"
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
