"""Plot a memory monitor CSV log (flud.memory.MemoryMonitor.open_log).

    python tools/plot_memory.py memory.csv memory.png "store 1 GiB" [static_rss_bytes]
"""

from __future__ import annotations

import csv
import sys

MiB = 1 << 20


def read_memory_log(csv_path) -> dict[str, list[float]]:
    """Columns of the log by name, as numbers."""
    with open(csv_path, newline="", encoding="ascii") as f:
        rows = list(csv.DictReader(f))
    columns = ("time", "rss", "active_transfers", "buffered_bytes", "peak_buffered")
    return {name: [float(row[name]) for row in rows] for name in columns}


def plot_memory_log(csv_path, png_path, title: str, static_rss: int | None = None) -> None:
    """RSS and buffered bytes over time, the static footprint as a horizontal line.

    static_rss defaults to the first sample's RSS (sampling normally starts
    right after MemoryMonitor.mark_static()); pass monitor.static_rss to be exact.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    log = read_memory_log(csv_path)
    if not log["time"]:
        raise ValueError(f"{csv_path} has no samples to plot")
    if static_rss is None:
        static_rss = log["rss"][0]
    figure, axes = plt.subplots(figsize=(9, 4.5))
    try:
        axes.plot(log["time"], [v / MiB for v in log["rss"]], label="RSS")
        axes.plot(log["time"], [v / MiB for v in log["buffered_bytes"]], label="buffered by transfers")
        axes.axhline(static_rss / MiB, linestyle="--", color="grey", label="static footprint")
        axes.set_xlabel("time (s)")
        axes.set_ylabel("MiB")
        axes.set_title(title)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left")
        figure.tight_layout()
        figure.savefig(png_path, dpi=100)
    finally:
        plt.close(figure)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    plot_memory_log(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else None)
