"""One bounded pool for CPU-heavy work (zfec, AES, hashing of large buffers).

Those C routines release the GIL, so running them on a few threads keeps the
reactor responsive and uses more than one core. The pool is bounded twice:
`size` threads, and at most `max_queued` calls waiting for a thread; a caller
beyond that gets PoolSaturated and must slow down instead of piling up
buffers in a queue.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from flud.errors import PoolSaturated

__all__ = ["CPUPool", "PoolSaturated", "DEFAULT_POOL_SIZE", "DEFAULT_MAX_QUEUED"]

DEFAULT_POOL_SIZE = 2
DEFAULT_MAX_QUEUED = 64
POOL_NAME = "flud-cpu"


class CPUPool:
    """Runs callables off the reactor thread; results come back as Deferreds.

    inline=True runs each callable at once on the caller's thread and returns
    an already-fired Deferred: deterministic unit tests, no threads.
    Threads start on the first run() (an idle node has none) and stop on
    stop() or at reactor shutdown.
    """

    def __init__(
        self,
        reactor,
        size: int = DEFAULT_POOL_SIZE,
        inline: bool = False,
        max_queued: int = DEFAULT_MAX_QUEUED,
        threadpool_factory: Callable[..., ThreadPool] = ThreadPool,
    ):
        if size < 1:
            raise ValueError(f"a CPU pool needs at least one thread, got size={size}")
        if max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {max_queued}")
        self._reactor = reactor
        self.size = size
        self.inline = inline
        self.max_queued = max_queued
        self._threadpool_factory = threadpool_factory
        self._threadpool: ThreadPool | None = None
        self._shutdown_trigger = None
        # Submitted and not yet finished; only touched on the reactor thread
        # (results are delivered there through callFromThread).
        self._outstanding = 0

    @property
    def queued(self) -> int:
        """Calls waiting for a free thread."""
        return max(0, self._outstanding - self.size)

    @property
    def running(self) -> bool:
        return self._threadpool is not None

    def run(self, fn: Callable[..., Any], *args: Any) -> defer.Deferred:
        """fn(*args) on a pool thread; the Deferred fires on the reactor thread.

        Raises PoolSaturated (synchronously) when max_queued calls already wait.
        """
        if self.inline:
            try:
                return defer.succeed(fn(*args))
            except Exception:
                return defer.fail()
        if self._outstanding >= self.size + self.max_queued:
            raise PoolSaturated(
                f"{self.queued} CPU jobs are already waiting (limit {self.max_queued}); "
                "wait for some to finish before submitting more"
            )
        self._outstanding += 1
        d = deferToThreadPool(self._reactor, self._ensure_started(), fn, *args)
        d.addBoth(self._finished)
        return d

    def stop(self) -> None:
        """Waits for running calls, then ends the threads. run() restarts the pool."""
        if self._shutdown_trigger is not None:
            self._reactor.removeSystemEventTrigger(self._shutdown_trigger)
            self._shutdown_trigger = None
        self._stop_threads()

    def _ensure_started(self) -> ThreadPool:
        if self._threadpool is None:
            # minthreads=0: threads are made on demand, up to size.
            self._threadpool = self._threadpool_factory(0, self.size, POOL_NAME)
            self._threadpool.start()
            self._shutdown_trigger = self._reactor.addSystemEventTrigger("during", "shutdown", self._on_shutdown)
        return self._threadpool

    def _on_shutdown(self) -> None:
        self._shutdown_trigger = None  # firing now; nothing to remove
        self._stop_threads()

    def _stop_threads(self) -> None:
        threadpool, self._threadpool = self._threadpool, None
        if threadpool is not None:
            threadpool.stop()

    def _finished(self, result):
        self._outstanding -= 1
        return result
