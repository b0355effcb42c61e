"""flud.lean.tune_malloc: buffers the hot paths make and free again and again
reuse the same memory instead of faulting in fresh pages each time (each
case in a fresh interpreter: malloc's settings are per process). The
client's own large buffers stay below its mmap threshold by design (see
test_wire's send window)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Allocates a buffer of each size (glibc's malloc itself, as CPython's large
# objects do), writes them and frees them together, 100 times, and prints
# the minor page faults the process took per round.
CHURN = """
import ctypes, resource, sys
sys.path[:0] = [{repo!r}]
from flud.lean import (M_MMAP_THRESHOLD, NODE_MMAP_THRESHOLD, NODE_TRIM_THRESHOLD,
                       tune_malloc)
libc = ctypes.CDLL("libc.so.6")
if {tuned}:
    tune_malloc({thresholds})
else:  # glibc's default thresholds, the mmap one held fixed (what flud did before)
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
sizes = {sizes!r}

def churn():
    held = [libc.malloc(size) for size in sizes]
    for pointer, size in zip(held, sizes):
        ctypes.memset(pointer, 1, size)  # written, as a read into it would be
    for pointer in reversed(held):
        libc.free(pointer)

churn()  # warm up: the heap grows once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    churn()
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print((after - before) / 100)
"""


# A connection's worth of socket reads and Twisted's joins, alive at once and
# freed together: ~2 MB, so most of it sits at the top of the heap whatever
# holes the interpreter's start left below.
CLIENT_SIZES = (16 * 1024, 64 * 1024) + (112 * 1024,) * 16
NODE_SIZES = (64 * 1024, 448 * 1024)  # socket reads, RETRIEVE ranges
NODE = "NODE_MMAP_THRESHOLD, NODE_TRIM_THRESHOLD"


def faults_per_round(tuned: bool, thresholds: str = "", sizes=CLIENT_SIZES) -> float:
    code = textwrap.dedent(CHURN.format(repo=str(REPO), tuned=tuned, thresholds=thresholds,
                                        sizes=sizes))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_client_keeps_its_heap_top_for_the_buffers_it_churns():
    # glibc's trim threshold gives back the top of the heap each time these
    # are freed together, and the next ones fault it in again (~430 pages).
    assert faults_per_round(False) > 200
    assert faults_per_round(True) < 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_node_reads_its_retrieve_ranges_into_the_heap():
    assert faults_per_round(False, sizes=NODE_SIZES) > 100  # a fresh map per range
    assert faults_per_round(True, sizes=NODE_SIZES) > 100   # the client's settings
    assert faults_per_round(True, NODE, NODE_SIZES) < 5
