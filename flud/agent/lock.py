"""One job at a time on a home, and one agent per home.

fcntl.flock on a file in the home: the kernel drops the lock when the process
that holds it exits, however it exits, so a crashed agent or job never
leaves a home locked. The holder writes its pid into the file after it has
the lock, so whoever finds it taken can name the process.

    job.lock    held by any job (backup, restore, verify...; by hand or the agent's)
    agent.lock  held by a running agent for its whole life
"""
import fcntl
import os

from flud.errors import FludError

JOB_LOCK = "job.lock"
AGENT_LOCK = "agent.lock"


class HomeBusy(FludError):
    """Another process holds the home's lock."""

    code = "HOME_BUSY"

    def __init__(self, message, pid=None):
        super().__init__(message)
        self.pid = pid


class HomeLock:
    """An exclusive, non-blocking flock on home/name; release() or the
    process's end lets it go."""

    def __init__(self, home: str, name: str = JOB_LOCK):
        self.path = os.path.join(home, name)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self):
        """The pid written by whoever holds (or last held) the lock, or None."""
        try:
            with open(self.path) as f:
                text = f.read().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def acquire(self, busy_message: str = "another job is running on this home") -> None:
        """Take the lock or raise HomeBusy naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.holder()
            raise HomeBusy(f"{busy_message} (pid {pid if pid else 'unknown'})", pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
