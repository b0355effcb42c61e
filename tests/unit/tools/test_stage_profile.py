"""tools/bench/stage_profile.py: a thread's CPU goes to the stage its stack
is in, the sampler's own CPU is its own line, and the floor is the tree's
bytes' single-core cost over the cores."""
import os
import threading
import time

from flud.crypto import content_digest
from tools.bench import stage_profile


def _hash_for(cpu_seconds, used):
    """flud's content digest (a stage "hash" frame) until this thread used
    cpu_seconds of CPU (the machine may be busy: its wall time says little)."""
    data = bytes(1 << 20)
    while time.thread_time() < cpu_seconds:
        content_digest(data)
    time.sleep(0.05)   # the sampler sees the thread once more before it ends
    used.append(time.thread_time())


def test_a_hashing_thread_is_counted_as_hash():
    sampler = stage_profile.StageSampler(period=0.005).start()
    used = []
    worker = threading.Thread(target=_hash_for, args=(0.3, used))
    worker.start()
    worker.join()
    seconds = sampler.stop()
    assert seconds.get("hash", 0) >= 0.8 * used[0], (seconds, used)
    assert seconds["hash"] <= 1.1 * used[0] + 0.05, (seconds, used)
    assert "hash" in stage_profile.split_text(seconds)


def test_the_floor_scales_the_sample_to_the_tree(tmp_path):
    for i in range(40):
        with open(tmp_path / f"f{i}", "wb") as f:
            f.write(os.urandom(50_000) + b"text " * 10_000)
    got = stage_profile.floor([str(tmp_path)], every=4, cores=2)
    assert got["files"] == 40 and got["bytes"] == 40 * 100_000
    assert got["sampled_bytes"] == 10 * 100_000
    assert all(v > 0 for v in got["stages"].values())
    assert abs(got["floor_s"] - got["one_core_s"] / 2) < 1e-3
    assert 0.5 < got["stored_fraction"] < 0.9   # the text half compresses
