"""flud/procfs.py against this very process (and one child we start)."""
import os
import subprocess
import sys
import time

import pytest

from flud import procfs


def _ticks_since_boot() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def test_own_stat_says_running_and_started_before_now():
    state, start = procfs.process_stat(os.getpid())
    assert state in ("R", "S")  # running now, or sleeping between two reads
    assert 0 < start <= _ticks_since_boot() + 1
    assert procfs.start_ticks(os.getpid()) == start  # the same process: the same start


def test_a_process_that_is_gone_reads_as_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names nothing now (until reused)
    if procfs.process_stat(child.pid) is not None:
        pytest.skip("the pid was reused already")
    assert procfs.start_ticks(child.pid) is None
    assert procfs.command_line(child.pid) is None


def test_a_zombie_is_told_apart():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while procfs.process_stat(child.pid)[0] != "Z":  # ended, not yet reaped
            assert time.monotonic() < deadline, procfs.process_stat(child.pid)
            time.sleep(0.01)
    finally:
        child.wait()


def test_own_rss_matches_the_status_file():
    rss = procfs.own_rss()
    status = procfs.status_bytes("self", "VmRSS")
    assert 1 << 20 < rss < 1 << 32
    assert abs(rss - status) < 4 << 20  # two reads, a moment apart
    assert procfs.status_bytes(os.getpid(), "VmHWM") >= status - (4 << 20)
    assert procfs.status_bytes("self", "NoSuchField") is None


def test_status_of_no_process_is_an_os_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    if procfs.process_stat(child.pid) is not None:
        pytest.skip("the pid was reused already")
    with pytest.raises(OSError):
        procfs.status_bytes(child.pid, "VmRSS")


def test_command_line():
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code, "a marker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"  # its command line is its own by now
        assert procfs.command_line(child.pid) == f"{sys.executable} -c {code} a marker "
    finally:
        child.communicate(b"")


def test_machine_cpu_ticks_grow():
    busy, total = procfs.machine_cpu_ticks()
    assert 0 <= busy <= total
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    busy2, total2 = procfs.machine_cpu_ticks()
    assert busy2 >= busy and total2 >= total
