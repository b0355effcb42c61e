"""The node's side of leases: its lease clock, renewals on requests, the sweep.

storage/leases.py keeps the rows and moves data to and from the trash; this
glue decides when. Every authenticated request of an owner renews its lease
(`seen`), but a renewal is a sqlite commit (an fsync of the WAL: ~1 ms here,
~10 ms on a spinning disk), and a node serves thousands of requests a second
during a restore; so an owner's lease is written at most once per
RENEW_EVERY of lease clock. An hour is 1/8760 of the default one-year
lease: the lease loses nothing of its meaning, and a crash forgets at most
an hour of renewals. An owner whose data is in the trash is renewed at
once, on the reactor thread, before its request is served: the request
that brings an owner back is answered from its data.

The sweep runs every `sweep_interval` on the injected clock, in a worker
(a purge can take a while). The first one also credits the time the node was
not running to every lease (nobody could renew while it was down).

The lease clock is wall time (it is what the rows hold), and wall time
jumps: NTP steps it, a user sets it, a laptop suspended for a month wakes
up a month later. Nothing that deletes data may trust it alone (a jump of
a year would trash every owner at once), so every sweep also reads a
monotonic clock (injected; time.monotonic, which stands still while the
machine sleeps) and compares the two gaps since the previous sweep
(`measure_gap`): a gap longer than a sweep interval was not time owners
could reach this node (it slept, was stopped, or its clock jumped), and is
credited to every lease as the first sweep credits downtime; a sweep whose
two clocks disagree trashes and purges nobody (the next one, on a clock
that is steady again, does what is due).

The lease clock is the reactor's clock plus an offset, 0 except under the
developer switch FLUD_NODE_CLOCK_FILE (docs/DESIGN.md): tests move a real
node's lease clock forward by writing seconds into that file, read at each
sweep.
"""
import logging
import time
from dataclasses import dataclass

from flud.storage.leases import LeaseTerms, SweepReport

log = logging.getLogger("flud.leases")

DEFAULT_SWEEP_INTERVAL = 3600.0
RENEW_EVERY = 3600.0
# Owners whose last renewal is remembered; past this the memory is cleared
# (each owner then writes its lease once more): bounds the map, not the owners.
RENEWALS_REMEMBERED = 16384
# Two clocks that disagree by more than this over one sweep interval: the
# wall clock jumped (or the machine slept). NTP slews at most 500 ppm, so an
# hour's interval drifts by 1.8 s; a minute is far from both.
JUMP_BOUND = 60.0
# A sweep may start this late (a busy reactor, a long purge before it)
# before the extra is credited to the leases.
LATE_BOUND = 60.0


@dataclass(frozen=True)
class Gap:
    """What one gap between sweeps holds against the leases."""
    charged: float  # seconds of lease clock the leases are held to
    jumped: bool    # the wall clock and the monotonic clock disagreed


def measure_gap(wall_delta: float, mono_delta: float, interval: float) -> Gap:
    """wall_delta, mono_delta: seconds since the previous sweep on each clock.
    Owners can only have been reaching this node for the monotonic time,
    and for at most one interval (plus LATE_BOUND) between two sweeps: the
    rest of the wall gap (a suspend, a stopped process, a jump forward) is
    not held against them. A jump backwards charges nothing."""
    jumped = abs(wall_delta - mono_delta) > JUMP_BOUND
    if not jumped and mono_delta <= interval + LATE_BOUND:
        return Gap(charged=wall_delta, jumped=False)  # the usual sweep: nothing to credit
    return Gap(charged=max(0.0, min(wall_delta, mono_delta, interval + LATE_BOUND)),
               jumped=jumped)


def offset_file_reader(path: str):
    """A callable returning the seconds written in `path` (None if unreadable)."""
    def read():
        try:
            with open(path, encoding="ascii") as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError) as err:
            log.warning("cannot read the lease clock offset from %s: %s", path, err)
            return None
    return read


class LeaseKeeper:
    def __init__(self, leases, clock, run_blocking, terms: LeaseTerms,
                 sweep_interval: float = DEFAULT_SWEEP_INTERVAL, read_offset=None,
                 on_purged=None, monotonic=time.monotonic):
        """leases: a flud.storage.leases.StoreLeases; clock: IReactorTime (the
        wall clock); run_blocking(fn, *args) -> Deferred; read_offset() ->
        seconds or None; on_purged(owner): told of each owner whose data a
        sweep deleted (the node forgets its root record too); monotonic():
        seconds on a clock that never jumps (tests drive their own)."""
        self._on_purged = on_purged
        self._leases = leases
        self._clock = clock
        self._run_blocking = run_blocking
        self.terms = terms
        self.sweep_interval = sweep_interval
        self._read_offset = read_offset
        self.offset = 0.0
        self._renewed = {}  # owner -> lease clock of its last renewal written
        self._call = None
        self._running = False
        self._monotonic = monotonic
        self._previous = None  # (wall, monotonic, offset) of the last sweep that credited
        self.counters = {"sweeps": 0, "renewals": 0, "restored": 0, "trashed": 0,
                         "purged": 0, "freed_bytes": 0, "sweep_errors": 0,
                         "clock_jumps": 0, "credited_seconds": 0.0}

    def now(self) -> float:
        return self._clock.seconds() + self.offset

    # ---- renewals ------------------------------------------------------------

    def seen(self, owner: bytes) -> None:
        """An authenticated request of `owner`: renew its lease if due."""
        now = self.now()
        last = self._renewed.get(owner)
        # a clock that went back since (now < last) writes at once: the row
        # then holds the time the sweeps will compare with
        if last is not None and 0 <= now - last < RENEW_EVERY \
                and not self._leases.is_trashed(owner):
            return
        try:
            restored = self._leases.renew(owner, now)
        except Exception as err:  # the request itself is still served
            log.warning("could not renew the lease of %s: %s", owner.hex()[:12], err)
            return
        self.counters["renewals"] += 1
        self.counters["restored"] += int(restored)
        if len(self._renewed) >= RENEWALS_REMEMBERED:
            self._renewed.clear()
        self._renewed[owner] = now

    # ---- the sweep -----------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._call = self._clock.callLater(0, self._sweep)

    def stop(self) -> None:
        self._running = False
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _refresh_offset(self) -> None:
        if self._read_offset is None:
            return
        offset = self._read_offset()
        if offset is not None and offset != self.offset:
            log.info("lease clock offset is now %.0f s", offset)
            self.offset = offset

    def sweep(self):
        """One sweep now; returns a Deferred firing with its SweepReport."""
        self._refresh_offset()
        wall, mono, offset = self._clock.seconds(), self._monotonic(), self.offset
        now = wall + offset
        if self._previous is None:  # the first sweep since the node started
            gap, allowance = None, self.sweep_interval
        else:
            last_wall, last_mono, last_offset = self._previous
            gap = measure_gap(wall - last_wall, mono - last_mono, self.sweep_interval)
            # The offset file moves the lease clock on purpose: never credited.
            allowance = gap.charged + (offset - last_offset)
        d = self._run_blocking(self._leases.credit_downtime, now, allowance)
        d.addCallback(self._credited, (wall, mono, offset))
        if gap is not None and gap.jumped:
            self.counters["clock_jumps"] += 1
            log.warning("the wall clock moved %.0f s while the monotonic clock moved %.0f s "
                        "(a clock jump or a suspend): credited to every lease, and nobody is "
                        "trashed or purged in this sweep", wall - self._previous[0],
                        mono - self._previous[1])
            d.addCallback(lambda _: SweepReport())
        else:
            d.addCallback(lambda _: self._run_blocking(self._leases.sweep, now, self.terms))
        d.addCallback(self._swept)
        return d

    def _credited(self, credit, reference) -> None:
        self._previous = reference
        self.counters["credited_seconds"] += credit

    def _swept(self, report):
        self.counters["sweeps"] += 1
        self.counters["trashed"] += len(report.trashed)
        self.counters["purged"] += len(report.purged)
        self.counters["freed_bytes"] += report.freed
        for owner in report.purged:
            self._renewed.pop(owner, None)
            if self._on_purged is not None:
                self._on_purged(owner)
        return report

    def _sweep(self):
        self._call = None
        d = self.sweep()

        def failed(failure):
            self.counters["sweep_errors"] += 1
            log.warning("lease sweep failed: %s", failure.getErrorMessage())

        d.addErrback(failed)
        d.addBoth(self._schedule)

    def _schedule(self, _):
        if self._running:
            self._call = self._clock.callLater(self.sweep_interval, self._sweep)

    def stats(self) -> dict:
        return {"clock": round(self.now(), 3), "lease_seconds": self.terms.lease,
                "trash_seconds": self.terms.trash, **self.counters,
                "credited_seconds": round(self.counters["credited_seconds"], 3)}
