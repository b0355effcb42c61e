import importlib.util
from pathlib import Path

import pytest
from twisted.internet import task

from flud.memory import MemoryMonitor

TOOL = Path(__file__).resolve().parents[3] / "tools" / "plot_memory.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("plot_memory", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_of_a_monitor_log(tmp_path):
    pytest.importorskip("matplotlib")
    clock = task.Clock()
    rss = iter(range(20 << 20, 40 << 20, 1 << 20))
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: next(rss))
    csv_path, png_path = tmp_path / "memory.csv", tmp_path / "memory.png"
    monitor.open_log(csv_path)
    monitor.mark_static()
    with monitor.transfer("upload", "f") as transfer:
        for step in range(5):
            transfer.hold(1 << 20, f"segment {step}")
            clock.advance(0.25)
            monitor.sample()
    monitor.close_log()

    tool = load_tool()
    assert tool.read_memory_log(csv_path)["buffered_bytes"] == [0, 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20]
    tool.plot_memory_log(csv_path, png_path, "test", static_rss=monitor.static_rss)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_an_empty_log(tmp_path):
    csv_path = tmp_path / "empty.csv"
    monitor = MemoryMonitor(rss_reader=lambda: 1)
    monitor.open_log(csv_path)
    monitor.close_log()
    with pytest.raises(ValueError, match="no samples"):
        load_tool().plot_memory_log(csv_path, tmp_path / "x.png", "empty")
