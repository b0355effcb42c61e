"""What every part of a client job works with, handed over as one thing.

A job (a backup, a restore) is made of small parts: each takes the
JobContext and the few things of its own it needs, instead of reaching
into the job that made it.
"""
import os
import time


class JobContext:
    """reactor: for callLater/callFromThread (a task.Clock in tests).
    home: the client home (config, index, secret). network: an INetwork.
    pool: the CPU pool (inline in tests). monitor: the memory monitor.
    progress: the progress lines. coder: the SegmentCoder of the job's k, n.
    clock: seconds, for elapsed times and the aggregator's flush ages."""

    __slots__ = ("reactor", "home", "network", "pool", "monitor", "progress", "coder", "clock")

    def __init__(self, reactor, home, network, pool, monitor, progress, coder,
                 clock=time.monotonic):
        self.reactor = reactor
        self.home = home
        self.network = network
        self.pool = pool
        self.monitor = monitor
        self.progress = progress
        self.coder = coder
        self.clock = clock

    @property
    def secret(self) -> bytes:
        return self.home.secret

    @property
    def index(self):
        return self.home.index


def wall_clock() -> float:
    """Unix seconds: the time a snapshot is made at, and prune's and forget's
    present. FLUD_NOW=SECONDS (a developer switch, DESIGN.md) fixes it, so
    tests simulate days of backups without sleeping."""
    fixed = os.environ.get("FLUD_NOW")
    return float(fixed) if fixed else time.time()
