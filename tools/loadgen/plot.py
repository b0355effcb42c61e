"""Pictures of a run or a sweep; matplotlib is imported only here, only when asked."""
import sys

from tools.loadgen.spec import OPS, format_size


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: .venv/bin/pip install -e '.[plot]'", file=sys.stderr)
        return None
    return plt


def _ms(x):
    return None if x is None else x * 1e3


def plot_run(doc: dict, path: str) -> bool:
    """Throughput, latency and the nodes' CPU over the measured window."""
    plt = _pyplot()
    if plt is None:
        return False
    intervals = doc.get("intervals", [])
    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    ax_ops, ax_bytes, ax_lat, ax_cpu = axes
    for op in OPS:
        pts = [(i["t"], i["ops"][op]) for i in intervals if op in i["ops"]]
        if not pts:
            continue
        t = [p[0] for p in pts]
        ax_ops.plot(t, [p[1]["ops_per_s"] or 0 for p in pts], marker=".", label=op)
        lat50 = [_ms(p[1]["latency_s"]["p50"]) for p in pts]
        lat99 = [_ms(p[1]["latency_s"]["p99"]) for p in pts]
        line, = ax_lat.plot(t, lat50, marker=".", label=f"{op} p50")
        ax_lat.plot(t, lat99, linestyle="--", color=line.get_color(), label=f"{op} p99")
    t = [i["t"] for i in intervals]
    up = [sum((s["bytes_up_per_s"] or 0) for s in i["ops"].values()) / 1e6 for i in intervals]
    down = [sum((s["bytes_down_per_s"] or 0) for s in i["ops"].values()) / 1e6 for i in intervals]
    ax_bytes.plot(t, up, marker=".", label="up (STORE)")
    ax_bytes.plot(t, down, marker=".", label="down (RETRIEVE)")
    series = [s for s in doc.get("node_series", []) if s.get("cpu_percent") is not None]
    ax_cpu.plot([s["t"] for s in series], [s["cpu_percent"] for s in series], marker=".",
                label="all nodes (sum)")
    ax_ops.set_ylabel("ops/s")
    ax_bytes.set_ylabel("MB/s")
    ax_lat.set_ylabel("latency ms")
    ax_lat.set_yscale("log")
    ax_cpu.set_ylabel("node CPU %")
    ax_cpu.set_xlabel("seconds into the measured window")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    cfg = doc.get("config", {})
    fig.suptitle(f"check_load: {cfg.get('clients')} x {cfg.get('sessions_per_client')} sessions, "
                 f"{len(cfg.get('nodes', []))} nodes, size {cfg.get('size', {}).get('spec')}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_sweep(doc: dict, path: str) -> bool:
    """TTFB p99, RPS and read throughput against sessions, one line per size."""
    plt = _pyplot()
    if plt is None:
        return False
    cells = [c for c in doc.get("cells", []) if not c.get("skipped")]
    sizes = sorted({c["size"] for c in cells})
    fig, (ax_ttfb, ax_rps, ax_mbs) = plt.subplots(3, 1, figsize=(9, 11), sharex=True)
    for size in sizes:
        row = sorted((c for c in cells if c["size"] == size), key=lambda c: c["sessions"])
        s = [c["sessions"] for c in row]
        label = format_size(size)
        line, = ax_ttfb.plot(s, [_ms(c["ttfb_p99_s"]) for c in row], marker="o", label=f"{label} p99")
        ax_ttfb.plot(s, [_ms(c["ttfb_avg_s"]) for c in row], linestyle=":", color=line.get_color())
        ax_rps.plot(s, [c["rps"] for c in row], marker="o", label=label)
        ax_mbs.plot(s, [c["read_bytes_per_s"] / 1e6 for c in row], marker="o", label=label)
    ax_ttfb.set_ylabel("RETRIEVE TTFB ms")
    ax_ttfb.set_yscale("log")
    ax_rps.set_ylabel("RETRIEVE RPS")
    ax_ttfb.set_title("lines: p99; dotted: average", fontsize="small")
    ax_mbs.set_ylabel("read MB/s")
    ax_mbs.set_xlabel("sessions")
    ticks = sorted({c["sessions"] for c in cells})
    for ax in (ax_ttfb, ax_rps, ax_mbs):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"check_load sweep: {doc.get('nodes')} nodes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
