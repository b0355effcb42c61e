"""The home's locks: one holder at a time, the holder named, and a holder
that dies (however) leaves nothing stuck."""
import os
import signal
import subprocess
import sys
import time

import pytest

from flud.agent.lock import AGENT_LOCK, HomeBusy, HomeLock

HOLD = """
import sys, time
from flud.agent.lock import HomeLock
HomeLock(sys.argv[1], sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_holder_is_refused_with_the_pid_of_the_first(tmp_path):
    first = HomeLock(str(tmp_path))
    first.acquire()
    with pytest.raises(HomeBusy) as err:
        HomeLock(str(tmp_path)).acquire()
    assert f"another job is running on this home (pid {os.getpid()})" == str(err.value)
    assert err.value.pid == os.getpid() and err.value.code == "HOME_BUSY"
    first.release()
    with HomeLock(str(tmp_path)) as again:
        assert again.held


def test_the_agent_lock_and_the_job_lock_are_apart(tmp_path):
    with HomeLock(str(tmp_path), AGENT_LOCK):
        with HomeLock(str(tmp_path)) as job:
            assert job.held


def test_a_killed_holder_leaves_the_lock_free(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), AGENT_LOCK],
                              stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(HomeBusy) as err:
            HomeLock(str(tmp_path), AGENT_LOCK).acquire(busy_message="an agent is running")
        assert f"(pid {holder.pid})" in str(err.value)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        lock = HomeLock(str(tmp_path), AGENT_LOCK)
        deadline = time.monotonic() + 5
        while True:
            try:
                lock.acquire()
                break
            except HomeBusy:
                assert time.monotonic() < deadline, "the dead holder's lock stayed"
                time.sleep(0.01)
        assert lock.holder() == os.getpid()
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
