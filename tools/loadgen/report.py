"""Tables for people, JSON for programs."""
import json
import math

from tools.loadgen.spec import OPS

MB = 1e6


def table(headers: list, rows: list, right=None) -> str:
    """Aligned columns; `right` is the set of column indexes aligned right
    (default: every column but the first)."""
    right = set(range(1, len(headers))) if right is None else set(right)
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def ms(seconds) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    v = seconds * 1e3
    if v < 10:
        return f"{v:.2f}"
    if v < 100:
        return f"{v:.1f}"
    return f"{v:.0f}"


def rate(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def mbs(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x / MB:.2f}"


def mb(x) -> str:
    return "-" if x is None else f"{x / MB:.1f}"


def pct(x) -> str:
    return "-" if x is None else f"{x:.1f}"


# ---- a run ----------------------------------------------------------------------

INTERVAL_HEADERS = ["time s", "op", "ops/s", "up MB/s", "down MB/s", "lat p50", "lat p99",
                    "ttfb p50", "ttfb p99", "errors", "nodes cpu%"]


class IntervalPrinter:
    """Prints one block of rows per interval, the header every 20 blocks."""

    def __init__(self, out):
        self.out = out
        self.blocks = 0

    def __call__(self, interval: dict) -> None:
        rows = []
        for op in OPS:
            s = interval["ops"].get(op)
            if s is None:
                continue
            rows.append(["" if rows else f"{interval['t']:.1f}", op, rate(s["ops_per_s"]), mbs(s["bytes_up_per_s"]),
                         mbs(s["bytes_down_per_s"]), ms(s["latency_s"]["p50"]),
                         ms(s["latency_s"]["p99"]), ms(s["ttfb_s"]["p50"]), ms(s["ttfb_s"]["p99"]),
                         s["errors"], "" if rows else pct(interval.get("nodes_cpu_percent"))])
        if not rows:
            rows.append([f"{interval['t']:.1f}", "(none)", "0", "", "", "", "", "", "", "0",
                         pct(interval.get("nodes_cpu_percent"))])
        text = table(INTERVAL_HEADERS, rows, right=set(range(len(INTERVAL_HEADERS))) - {1})
        lines = text.split("\n")
        if self.blocks % 20 == 0:
            self.out(lines[0])
        for line in lines[1:]:
            self.out(line)
        self.blocks += 1


def ops_table(result: dict) -> str:
    headers = ["op", "ops", "ops/s", "up MB/s", "down MB/s", "lat avg", "lat p50", "lat p99",
               "ttfb avg", "ttfb p50", "ttfb p99", "errors"]
    rows = []
    for op in OPS:
        s = result["ops"].get(op)
        if s is None:
            continue
        lat, ttfb = s["latency_s"], s["ttfb_s"]
        rows.append([op, s["ops"], rate(s["ops_per_s"]), mbs(s["bytes_up_per_s"]),
                     mbs(s["bytes_down_per_s"]), ms(lat["avg"]), ms(lat["p50"]), ms(lat["p99"]),
                     ms(ttfb["avg"]), ms(ttfb["p50"]), ms(ttfb["p99"]), s["errors"]])
    t = result["total"]
    rows.append(["total", t["ops"], rate(t["ops_per_s"]), mbs(t["bytes_up_per_s"]),
                 mbs(t["bytes_down_per_s"]), "", "", "", "", "", "", t["errors"]])
    return table(headers, rows) + "\n(latency and TTFB in ms; MB = 10^6 bytes)"


def errors_table(result: dict) -> str:
    rows = []
    for op in OPS:
        s = result["ops"].get(op)
        if s is None:
            continue
        for kind, n in s["errors_by_kind"].items():
            rows.append([op, kind, n])
    if not rows:
        return "errors: none"
    return "errors by kind\n" + table(["op", "kind", "count"], rows, right={2})


def nodes_table(result: dict, limit: int = 0) -> str:
    rows = []
    alive = [r for r in result["nodes"] if "cpu_percent" in r]
    for r in result["nodes"]:
        if limit and len(rows) >= limit:
            break
        state = "" if r["alive_start"] and r["alive_end"] else (
            "down at end" if r["alive_start"] else "down at start" if r["alive_end"] else "down")
        rows.append([r["index"], r["node_id"][:8], r["port"], pct(r.get("cpu_percent")),
                     mb(r.get("rss")), mb(_sub(r.get("rss"), r.get("rss_start"))),
                     mb(r.get("payload_in")), mb(r.get("payload_out")),
                     mb(r.get("bytes_in")), mb(r.get("bytes_out")),
                     r.get("requests", "-"), r.get("errors", "-"), r.get("connections", "-"), state])
    if alive:
        def col(name):
            return [r[name] for r in alive if r.get(name) is not None]
        cpu, rss = col("cpu_percent"), col("rss")
        rows.append(["sum", f"{len(alive)} up", "", pct(sum(cpu)) if cpu else "-",
                     mb(sum(rss)) if rss else "-", "", mb(sum(col("payload_in"))),
                     mb(sum(col("payload_out"))),
                     mb(sum(col("bytes_in"))) if col("bytes_in") else "-",
                     mb(sum(col("bytes_out"))) if col("bytes_out") else "-",
                     sum(col("requests")), sum(col("errors")), "", ""])
        rows.append(["max", "", "", pct(max(cpu)) if cpu else "-", mb(max(rss)) if rss else "-",
                     "", "", "", "", "", "", "", "", ""])
    headers = ["#", "node", "port", "cpu %", "rss MB", "drss MB", "pay in MB", "pay out MB",
               "net in MB", "net out MB", "requests", "errors", "conns", ""]
    text = table(headers, rows)
    notes = ["(cpu % = delta cpu_seconds / wall time between the STATS samples; "
             "pay = share bytes stored/retrieved, from the nodes' server counters)"]
    missing = result.get("nodes_missing_fields")
    if missing:
        notes.append("(net in/out: the nodes' STATS have no " + ", ".join(missing) + ")")
    return "nodes\n" + text + "\n" + "\n".join(notes)


def clients_table(result: dict) -> str:
    rows = [[c["index"], c["pid"], c["sessions"], pct(c["cpu_percent"]), mb(c["rss"]), c["ops"],
             c["connected"] if c["connected"] is not None else "-",
             c["exit_code"], "killed" if c["killed"] else (c["fatal"] or "")]
            for c in result["clients"]]
    return "client processes\n" + table(
        ["#", "pid", "sessions", "cpu %", "rss MB", "ops", "nodes", "exit", ""], rows)


def _sub(a, b):
    return None if a is None or b is None else a - b


def run_text(result: dict, header: str, node_limit: int = 0) -> str:
    parts = [header, ops_table(result), errors_table(result)]
    w = result["warmup"]
    if w["ops"] or w["errors"]:
        parts.append(f"warm-up: {w['ops']} stores in {w['elapsed_s']:.2f} s "
                     f"({w['errors']} errors), not counted above")
    c = result["cleanup"]
    if c["ops"] or c["errors"] or c["left"]:
        errs = sum(c["errors"].values())
        parts.append(f"clean-up: {c['ops']} deletes ({errs} errors), {c['left']} objects left")
    parts.append(nodes_table(result, node_limit))
    parts.append(clients_table(result))
    load = result.get("loadavg_1min") or {}
    if load.get("start") is not None:
        parts.append(f"machine: load average {load['start']:.1f} at the start, "
                     f"{load['end']:.1f} at the end, {load['cpus']} CPUs "
                     f"(other work on the machine shows up here)")
    if result.get("interrupted"):
        parts.append("(interrupted: figures cover the part that ran)")
    return "\n\n".join(parts)


def write_json(path: str, value) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=1, default=_json_default)
    import os
    os.replace(path + ".tmp", path)


def _json_default(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    return str(x)
