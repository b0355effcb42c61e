"""The memory monitor: what every transfer buffers, what the process uses, and a
byte budget that makes producers wait instead of growing memory.

Two ways to count bytes, both per transfer and in total:

- hold()/release(): accounting only, never waits. For buffers that exist
  anyway (a received frame, a decoded block).
- reserve()/unreserve(): admission. The Deferred fires once the bytes fit
  under the budget, then they count as buffered. Reserve *before* reading or
  allocating, and do not also hold() the same bytes.
- hand_over(): granted bytes change hands (another label, another transfer,
  or from/to a free-standing reservation) without leaving the budget, so no
  waiter can take them in between: a producer reserves once (free-standing:
  no buffer holds those bytes yet), then attributes what it built (a bundle,
  the tars it went into) to the transfers that hold it.

RSS is sampled separately (psutil, imported on the first sample) and can be
logged to CSV for plots (tools/plot_memory.py).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import time
from typing import IO, Callable

from twisted.internet import defer
from twisted.logger import Logger

__all__ = [
    "MemoryMonitor",
    "Transfer",
    "DEFAULT_BUDGET",
    "DEFAULT_SAMPLE_INTERVAL",
    "SNAPSHOT_TRANSFER_LIMIT",
    "LOG_HEADER",
]

MiB = 1 << 20
DEFAULT_BUDGET = 64 * MiB
DEFAULT_SAMPLE_INTERVAL = 0.25
SNAPSHOT_TRANSFER_LIMIT = 50
LOG_HEADER = "time,rss,active_transfers,buffered_bytes,peak_buffered,peak_transfer"

_log = Logger()


def _check_size(nbytes: int) -> None:
    if nbytes < 0:
        raise ValueError(f"byte counts must be >= 0, got {nbytes}")


def _take(counts: dict[str, int], nbytes: int, what: str, verb: str) -> None:
    """Subtract from counts[what], refusing to go below zero (an accounting bug)."""
    have = counts.get(what, 0)
    if nbytes > have:
        raise ValueError(f"cannot {verb} {nbytes} bytes of {what!r}: only {have} counted")
    if have == nbytes:
        del counts[what]  # keep the per-transfer dicts as small as the live labels
    else:
        counts[what] = have - nbytes


class _Waiter:
    __slots__ = ("nbytes", "deferred", "transfer", "what")

    def __init__(self, nbytes: int, transfer: Transfer | None, what: str):
        self.nbytes = nbytes
        self.transfer = transfer
        self.what = what
        self.deferred: defer.Deferred = None  # set right after creation


class Transfer:
    """One upload, download, store, retrieve, tar...: its buffers and their peak.

    Use as a context manager; close() returns whatever it still counts.
    """

    def __init__(self, monitor: MemoryMonitor, transfer_id: int, kind: str, name: str, started: float):
        self._monitor = monitor
        self._id = transfer_id
        self.kind = kind
        self.name = name
        self.started = started
        self.peak_bytes = 0
        self.closed = False
        self._held: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._waiters: set[_Waiter] = set()

    def __repr__(self) -> str:
        return f"<Transfer {self.kind} {self.name!r} {self.current_bytes} bytes>"

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def current_bytes(self) -> int:
        return sum(self._held.values()) + sum(self._reserved.values())

    def hold(self, nbytes: int, what: str) -> None:
        self._check_open()
        _check_size(nbytes)
        self._held[what] = self._held.get(what, 0) + nbytes
        self._monitor._add_held(nbytes)
        self._note_peak()

    def release(self, nbytes: int, what: str) -> None:
        _check_size(nbytes)
        _take(self._held, nbytes, what, "release")
        self._monitor._remove_held(nbytes)

    def reserve(self, nbytes: int, what: str) -> defer.Deferred:
        """Budget admission for this transfer; fires with nbytes once granted.

        Pending reservations are cancelled (CancelledError) by close().
        """
        self._check_open()
        return self._monitor._request(nbytes, self, what)

    def unreserve(self, nbytes: int, what: str) -> None:
        _check_size(nbytes)
        _take(self._reserved, nbytes, what, "unreserve")
        self._monitor._remove_reserved(nbytes)

    def reserved(self, what: str) -> int:
        """Granted bytes under this label."""
        return self._reserved.get(what, 0)

    def held(self, what: str) -> int:
        """Bytes held under this label."""
        return self._held.get(what, 0)

    def hand_over(self, nbytes: int, what: str, to: Transfer | MemoryMonitor | None = None,
                  to_what: str | None = None) -> None:
        """Moves granted bytes from label `what` to `to` (default: this
        transfer) under `to_what` (default: the same label), or back to a
        free-standing reservation if `to` is the monitor. They stay counted
        and inside the budget: nothing is admitted in between."""
        _check_size(nbytes)
        to = self if to is None else to
        if nbytes == 0:
            return
        if to is self._monitor:
            _take(self._reserved, nbytes, what, "hand over")
            to._free_reserved += nbytes
            return
        if not isinstance(to, Transfer) or to._monitor is not self._monitor:
            raise ValueError("cannot hand bytes over to another monitor's transfer")
        to._check_open()
        _take(self._reserved, nbytes, what, "hand over")
        to._granted(nbytes, what if to_what is None else to_what)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for waiter in list(self._waiters):
            waiter.deferred.cancel()
        held, reserved = sum(self._held.values()), sum(self._reserved.values())
        self._held.clear()
        self._reserved.clear()
        self._monitor._finish(self, held, reserved)

    def as_dict(self, now: float) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "age": now - self.started,
            "bytes": self.current_bytes,
            "peak_bytes": self.peak_bytes,
            "held": dict(self._held),
            "reserved": dict(self._reserved),
        }

    def _granted(self, nbytes: int, what: str) -> None:
        self._reserved[what] = self._reserved.get(what, 0) + nbytes
        self._note_peak()

    def _note_peak(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"{self!r} is closed")


class MemoryMonitor:
    """Counts buffered bytes per transfer, samples RSS, enforces a byte budget."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        rss_reader: Callable[[], int] | None = None,
        budget_bytes: int = DEFAULT_BUDGET,
    ):
        if budget_bytes <= 0:
            raise ValueError(f"memory budget must be > 0 bytes, got {budget_bytes}")
        self._clock = clock
        self._epoch = clock()
        self._rss_reader = rss_reader
        self.budget_bytes = budget_bytes
        self._active: dict[int, Transfer] = {}
        self._ids = itertools.count()
        self._held = 0
        self._reserved = 0  # granted reservations, free-standing or per transfer
        self._free_reserved = 0  # the part made by MemoryMonitor.reserve()
        # FIFO so a large request is not starved by a stream of small ones. Its
        # length is bounded by the callers, and a waiter holds no data yet.
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._admitting = False
        self.peak_buffered_bytes = 0
        self._peak_finished_transfer = 0
        self.finished_transfers = 0
        self.rss = 0  # 0 until the first sample
        self.peak_rss = 0
        self.static_rss = 0  # 0 until mark_static()
        self._log_file: IO[str] | None = None
        self._sampling = None

    # --- transfers ------------------------------------------------------------

    def transfer(self, kind: str, name: str) -> Transfer:
        if not kind:
            raise ValueError("a transfer needs a kind, such as 'upload' or 'store'")
        transfer = Transfer(self, next(self._ids), kind, name, self._clock())
        self._active[transfer._id] = transfer
        return transfer

    @property
    def active_transfers(self) -> int:
        return len(self._active)

    @property
    def buffered_bytes(self) -> int:
        """Bytes held by transfers plus all granted reservations."""
        return self._held + self._reserved

    @property
    def reserved_bytes(self) -> int:
        return self._reserved

    @property
    def waiting_reservations(self) -> int:
        return len(self._waiters)

    @property
    def peak_transfer_bytes(self) -> int:
        """Largest footprint any one transfer reached, finished or active."""
        active_peaks = (t.peak_bytes for t in self._active.values())
        return max(self._peak_finished_transfer, *active_peaks, 0)

    def _add_held(self, nbytes: int) -> None:
        self._held += nbytes
        self._note_peak()

    def _remove_held(self, nbytes: int) -> None:
        self._held -= nbytes
        self._admit()

    def _remove_reserved(self, nbytes: int) -> None:
        self._reserved -= nbytes
        self._admit()

    def _note_peak(self) -> None:
        self.peak_buffered_bytes = max(self.peak_buffered_bytes, self.buffered_bytes)

    def _finish(self, transfer: Transfer, held: int, reserved: int) -> None:
        del self._active[transfer._id]
        self.finished_transfers += 1
        self._peak_finished_transfer = max(self._peak_finished_transfer, transfer.peak_bytes)
        self._held -= held
        self._reserved -= reserved
        self._admit()

    # --- budget -----------------------------------------------------------------

    def reserve(self, nbytes: int) -> defer.Deferred:
        """Fires with nbytes once they fit under the budget (FIFO).

        A request larger than the whole budget is let in when no other
        reservation is outstanding, so it cannot wait forever.
        """
        return self._request(nbytes, None, "")

    def unreserve(self, nbytes: int) -> None:
        _check_size(nbytes)
        if nbytes > self._free_reserved:
            raise ValueError(f"cannot unreserve {nbytes} bytes: only {self._free_reserved} reserved")
        self._free_reserved -= nbytes
        self._remove_reserved(nbytes)

    def hand_over(self, nbytes: int, to: Transfer, what: str) -> None:
        """Moves free-standing granted bytes (reserve()) to a transfer, under
        `what`: no admission in between (see Transfer.hand_over)."""
        _check_size(nbytes)
        if nbytes == 0:
            return
        if not isinstance(to, Transfer) or to._monitor is not self:
            raise ValueError("cannot hand bytes over to another monitor's transfer")
        to._check_open()
        if nbytes > self._free_reserved:
            raise ValueError(f"cannot hand over {nbytes} bytes: only {self._free_reserved} reserved")
        self._free_reserved -= nbytes
        to._granted(nbytes, what)

    def _request(self, nbytes: int, transfer: Transfer | None, what: str) -> defer.Deferred:
        _check_size(nbytes)
        waiter = _Waiter(nbytes, transfer, what)
        waiter.deferred = defer.Deferred(canceller=lambda _d: self._cancel(waiter))
        if transfer is not None:
            transfer._waiters.add(waiter)
        self._waiters.append(waiter)
        self._admit()
        return waiter.deferred

    @contextlib.contextmanager
    def no_admission(self):
        """Inside, releases admit no waiter: they are admitted once, at the
        end. For a caller that moves bytes around in several steps and must
        not have a granted callback (which may run anything) see it halfway."""
        if self._admitting:  # already inside _admit() or another such block
            yield
            return
        self._admitting = True
        try:
            yield
        finally:
            self._admitting = False
            self._admit()

    def _fits(self, nbytes: int) -> bool:
        if nbytes > self.budget_bytes:
            return self._reserved == 0
        return self.buffered_bytes + nbytes <= self.budget_bytes

    def _admit(self) -> None:
        # Callbacks of a granted reservation may reserve or unreserve again;
        # the outer loop re-reads the state on every turn, so nested calls
        # just leave the work to it.
        if self._admitting:
            return
        self._admitting = True
        try:
            while self._waiters and self._fits(self._waiters[0].nbytes):
                waiter = self._waiters.popleft()
                self._reserved += waiter.nbytes
                if waiter.transfer is None:
                    self._free_reserved += waiter.nbytes
                else:
                    waiter.transfer._waiters.discard(waiter)
                    waiter.transfer._granted(waiter.nbytes, waiter.what)
                self._note_peak()
                waiter.deferred.callback(waiter.nbytes)
        finally:
            self._admitting = False

    def _cancel(self, waiter: _Waiter) -> None:
        self._waiters.remove(waiter)
        if waiter.transfer is not None:
            waiter.transfer._waiters.discard(waiter)
        self._admit()  # the head may have changed

    # --- RSS sampling and the CSV log --------------------------------------------

    def _read_rss(self) -> int:
        if self._rss_reader is None:
            self._rss_reader = _psutil_rss_reader()
        return self._rss_reader()

    def sample(self) -> int:
        """Reads RSS now, updates the peak, appends a log row if a log is open."""
        self.rss = self._read_rss()
        self.peak_rss = max(self.peak_rss, self.rss)
        if self._log_file is not None:
            self._log_file.write(
                f"{self._clock() - self._epoch:.3f},{self.rss},{self.active_transfers},"
                f"{self.buffered_bytes},{self.peak_buffered_bytes},{self.peak_transfer_bytes}\n"
            )
        return self.rss

    def mark_static(self) -> int:
        """Records the set-up process's RSS: the footprint before any transfer."""
        self.static_rss = self.sample()
        return self.static_rss

    def open_log(self, path) -> None:
        """Starts a CSV log (LOG_HEADER columns; time in seconds since the monitor began)."""
        self.close_log()
        self._log_file = open(path, "w", buffering=1, encoding="ascii")  # line-buffered
        self._log_file.write(LOG_HEADER + "\n")

    def close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def start_sampling(self, clock, interval: float = DEFAULT_SAMPLE_INTERVAL) -> None:
        """Samples every `interval` seconds on `clock` (a reactor or task.Clock)."""
        from twisted.internet.task import LoopingCall

        self.stop_sampling()
        self._sampling = LoopingCall(self.sample)
        self._sampling.clock = clock
        self._sampling.start(interval, now=True).addErrback(
            lambda failure: _log.failure("memory sampling stopped", failure)
        )

    def stop_sampling(self) -> None:
        if self._sampling is not None and self._sampling.running:
            self._sampling.stop()
        self._sampling = None

    # --- reporting ---------------------------------------------------------------

    def snapshot(self) -> dict:
        now = self._clock()
        biggest = sorted(self._active.values(), key=lambda t: t.current_bytes, reverse=True)
        return {
            "time": now - self._epoch,
            "rss": self.rss,
            "peak_rss": self.peak_rss,
            "static_rss": self.static_rss,
            "budget_bytes": self.budget_bytes,
            "buffered_bytes": self.buffered_bytes,
            "reserved_bytes": self.reserved_bytes,
            "peak_buffered_bytes": self.peak_buffered_bytes,
            "peak_transfer_bytes": self.peak_transfer_bytes,
            "active_transfers": self.active_transfers,
            "finished_transfers": self.finished_transfers,
            "waiting_reservations": self.waiting_reservations,
            "transfers": [t.as_dict(now) for t in biggest[:SNAPSHOT_TRANSFER_LIMIT]],
            "transfers_omitted": max(0, len(biggest) - SNAPSHOT_TRANSFER_LIMIT),
        }


def _psutil_rss_reader() -> Callable[[], int]:
    import psutil  # only once sampling starts: a process that never samples never loads it

    process = psutil.Process()
    return lambda: process.memory_info().rss
