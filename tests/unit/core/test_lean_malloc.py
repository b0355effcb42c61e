"""flud.lean.tune_malloc: buffers the hot paths make and free again and again
reuse the same memory instead of faulting in fresh pages each time (each
case in a fresh interpreter: malloc's settings are per process)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Allocates and frees a buffer of each size 200 times (a socket read, Twisted
# joining queued TLS records, a node's read of a RETRIEVE range) and prints
# the minor page faults the process took per round.
CHURN = """
import resource, sys
sys.path[:0] = [{repo!r}]
from flud.lean import M_MMAP_THRESHOLD, NODE_TRIM_THRESHOLD, TRIM_THRESHOLD, tune_malloc
if {tuned}:
    tune_malloc({trim})
else:  # glibc's default threshold, held fixed (what flud did before)
    import ctypes
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024)
sizes = {sizes!r}
keep = [bytearray(1000) for _ in range(50)]  # a heap with something in it
for size in sizes:  # warm up: the heap grows once
    b"\x01" * size
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    for size in sizes:
        buffer = b"\x01" * size  # written, as a read into it would be
        del buffer
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print((after - before) / 200)
"""


CLIENT_SIZES = (64 * 1024, 272 * 1024, 448 * 1024)
NODE_SIZES = (64 * 1024, 448 * 1024)  # socket reads, RETRIEVE ranges


def faults_per_round(tuned: bool, trim: str = "TRIM_THRESHOLD", sizes=CLIENT_SIZES) -> float:
    code = textwrap.dedent(CHURN.format(repo=str(REPO), tuned=tuned, trim=trim, sizes=sizes))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_malloc_reuses_memory_for_buffers_below_a_mebibyte():
    untuned = faults_per_round(False)
    tuned = faults_per_round(True)
    # At 128 KiB the 272 and 448 KiB buffers are fresh maps: ~180 faults a round.
    assert untuned > 100, untuned
    assert tuned < 5, tuned


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_nodes_smaller_trim_threshold_still_covers_its_buffers():
    assert faults_per_round(False, sizes=NODE_SIZES) > 100
    assert faults_per_round(True, "NODE_TRIM_THRESHOLD", NODE_SIZES) < 5
