"""Sweep: object size x concurrency, reported the way the CORTX baseline was.

Each cell is a small load run with fresh client processes: every session
stores W objects of the cell's size (the write figures), then RETRIEVEs them
at random for --cell-duration or --cell-ops (the read figures: TTFB average
and p99, RPS, MB/s), then deletes them. A session never has more than one
object in flight, and W is chosen so that sessions x W x size stays under
--mem-cap; a cell whose sessions x size alone exceeds the cap is skipped
with a note (128 MB x 256 sessions would hold 32 GiB at once).
"""
import sys
import time

from twisted.internet import defer

from tools.loadgen import report
from tools.loadgen.runner import LoadRun, Plan
from tools.loadgen.spec import format_size


def spread(total: int, processes: int) -> list:
    """Total sessions over at most `processes` client processes, evenly."""
    n = max(1, min(processes, total))
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def warmup_count(sessions: int, size: int, wanted: int, cap: int) -> int:
    return max(1, min(max(wanted, 1), cap // max(1, sessions * size)))


def summarize(result: dict, size: int, sessions: int, processes: int, warm_objects: int) -> dict:
    read = result["ops"].get("retrieve")
    warm = result["warmup"]
    errors = {}
    for op, s in result["ops"].items():
        for kind, n in s["errors_by_kind"].items():
            errors[f"{op}:{kind}"] = errors.get(f"{op}:{kind}", 0) + n
    for kind, n in warm["errors_by_kind"].items():
        errors[f"warmup-store:{kind}"] = errors.get(f"warmup-store:{kind}", 0) + n
    for kind, n in result["cleanup"]["errors"].items():
        errors[f"cleanup-delete:{kind}"] = errors.get(f"cleanup-delete:{kind}", 0) + n
    nodes_cpu = [r["cpu_percent"] for r in result["nodes"] if r.get("cpu_percent") is not None]
    clients_cpu = [c["cpu_percent"] for c in result["clients"] if c.get("cpu_percent") is not None]
    return {
        "size": size, "sessions": sessions, "processes": processes,
        "objects_per_session": warm_objects, "elapsed_s": result["elapsed_s"],
        "read_ops": read["ops"] if read else 0,
        "ttfb_avg_s": read["ttfb_s"]["avg"] if read else None,
        "ttfb_p50_s": read["ttfb_s"]["p50"] if read else None,
        "ttfb_p99_s": read["ttfb_s"]["p99"] if read else None,
        "latency_avg_s": read["latency_s"]["avg"] if read else None,
        "latency_p99_s": read["latency_s"]["p99"] if read else None,
        "rps": read["ops_per_s"] if read else 0.0,
        "read_bytes_per_s": read["bytes_down_per_s"] if read else 0.0,
        "write_ops": warm["ops"],
        "write_rps": warm["ops"] / warm["elapsed_s"] if warm["elapsed_s"] else None,
        "write_bytes_per_s": warm["bytes_up"] / warm["elapsed_s"] if warm["elapsed_s"] else None,
        "write_latency_p99_s": warm["latency_s"]["p99"],
        "errors": sum(errors.values()), "errors_by_kind": errors,
        "nodes_cpu_percent": sum(nodes_cpu) if nodes_cpu else None,
        "clients_cpu_percent": sum(clients_cpu) if clients_cpu else None,
        "loadavg_1min": result.get("loadavg_1min"),
    }


def errors_begin(cells: list, size: int):
    ran = sorted((c for c in cells if c["size"] == size and not c.get("skipped")),
                 key=lambda c: c["sessions"])
    for c in ran:
        if c["errors"]:
            return c["sessions"]
    return None


def size_table(cells: list, size: int) -> str:
    rows = []
    for c in sorted((c for c in cells if c["size"] == size), key=lambda c: c["sessions"]):
        if c.get("skipped"):
            rows.append([c["sessions"], "skipped: " + c["skipped"]] + [""] * 9)
            continue
        rows.append([c["sessions"], report.ms(c["ttfb_avg_s"]), report.ms(c["ttfb_p99_s"]),
                     report.ms(c["latency_p99_s"]), report.rate(c["rps"]),
                     report.mbs(c["read_bytes_per_s"]), report.rate(c["write_rps"]),
                     report.mbs(c["write_bytes_per_s"]), report.ms(c["write_latency_p99_s"]),
                     c["errors"], report.pct(c["nodes_cpu_percent"])])
    headers = ["sessions", "TTFB avg ms", "TTFB p99 ms", "lat p99 ms", "RPS", "read MB/s",
               "write RPS", "write MB/s", "write p99 ms", "errors", "nodes cpu%"]
    return table_with_skips(headers, rows)


def table_with_skips(headers, rows) -> str:
    normal = [r for r in rows if not str(r[1]).startswith("skipped")]
    text = report.table(headers, normal, right=range(len(headers)))
    lines = text.split("\n")
    width = len(str(headers[0]))
    for r in rows:
        if str(r[1]).startswith("skipped"):
            lines.append(f"{str(r[0]).rjust(max(width, 8))}  {r[1]}")
    return "\n".join(lines)


def sweep_text(cells: list, sizes: list) -> str:
    parts = []
    for size in sizes:
        parts.append(f"object size {format_size(size)} (read = RETRIEVE of stored objects; "
                     f"write = the STOREs that put them there)\n" + size_table(cells, size))
    lines = []
    for size in sizes:
        n = errors_begin(cells, size)
        ran = [c["sessions"] for c in cells if c["size"] == size and not c.get("skipped")]
        upto = max(ran) if ran else 0
        lines.append([format_size(size),
                      f"{n} sessions" if n else (f"none up to {upto} sessions" if ran else "no cell ran")])
    parts.append("errors begin at\n" + report.table(["size", "errors begin at"], lines, right=()))
    return "\n\n".join(parts)


@defer.inlineCallbacks
def run_sweep(reactor, args, nodes, probe, workdir, state):
    sizes, counts = args.sweep_size_list, args.sweep_session_list
    cap = args.mem_cap_bytes
    print(f"check_load sweep: sizes {', '.join(format_size(s) for s in sizes)} x sessions "
          f"{', '.join(map(str, counts))} over up to {args.clients} client processes, "
          f"{len(nodes)} nodes, {args.cell_duration:g} s or {args.cell_ops} ops per cell, "
          f"memory cap {args.mem_cap}, seed {args.seed}", flush=True)
    cells = []
    started = time.time()
    for size in sizes:
        for total in counts:
            if state.get("interrupted"):
                break
            if total * size > cap:
                note = (f"{total} sessions x {format_size(size)} = {format_size(total * size)} "
                        f"> memory cap {args.mem_cap}")
                cells.append({"size": size, "sessions": total, "skipped": note})
                print(f"  {format_size(size):>6} x {total:>4} sessions: skipped ({note})", flush=True)
                continue
            per_process = spread(total, args.clients)
            objects = warmup_count(total, size, args.warmup_objects, cap)
            plan = Plan(nodes=nodes, sessions=per_process, mix={"retrieve": 1.0}, size=str(size),
                        max_size=size, delay=0.0, duration=args.cell_duration, ops=args.cell_ops,
                        seed=args.seed, interval=args.cell_duration, warmup_objects=objects,
                        op_timeout=args.op_timeout, check=args.check, cleanup=True,
                        workdir=workdir, label=f"cell-{size}-{total}")
            run = LoadRun(reactor, plan, probe)
            state["current"] = run
            state["runs"].append(run)
            result = yield run.run()
            cell = summarize(result, size, total, len(per_process), objects)
            cells.append(cell)
            print(f"  {format_size(size):>6} x {total:>4} sessions: TTFB avg {report.ms(cell['ttfb_avg_s'])} "
                  f"p99 {report.ms(cell['ttfb_p99_s'])} ms, {report.rate(cell['rps'])} RPS, "
                  f"{report.mbs(cell['read_bytes_per_s'])} MB/s read, "
                  f"{report.rate(cell['write_rps'])} writes/s, {cell['errors']} errors", flush=True)
    print()
    print(sweep_text(cells, sizes), flush=True)
    if state.get("interrupted"):
        print("(interrupted: the cells after the interruption did not run)")
    doc = {"tool": "check_load", "mode": "sweep", "version": 1, "started": started,
           "argv": sys.argv[1:], "seed": args.seed, "clients": args.clients,
           "cell_duration_s": args.cell_duration, "cell_ops": args.cell_ops,
           "mem_cap_bytes": cap, "nodes": len(nodes), "cells": cells,
           "errors_begin_at": {str(s): errors_begin(cells, s) for s in sizes}}
    if args.json:
        report.write_json(args.json, doc)
        print(f"\nJSON written to {args.json}")
    if args.plot:
        from tools.loadgen.plot import plot_sweep
        if plot_sweep(doc, args.plot):
            print(f"plot written to {args.plot}")
    return 0
