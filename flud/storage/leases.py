"""Leases: an owner who stops coming back does not hold a node's disk forever.

Every owner with data on the store has one lease row: when it was last seen
and, once its lease ran out, since when its data is in the trash. The node
renews a lease when the owner makes a request (flud/node/leases.py decides
how often and keeps the clock); this module keeps the rows and moves data:

- an owner not seen for `lease` seconds goes to the trash: its data is no
  longer served (its reads answer NotFound, as for a key never stored) but
  still occupies the disk;
- an owner seen again while in the trash is out of it at once, everything
  served again as before;
- an owner in the trash for `trash` more seconds is purged: its holdings go,
  a share whose last owner it was is freed, its archive is removed whole.
  A purge commits BATCH holdings at a time, each batch checking the owner is
  still due, so an owner who comes back in the middle keeps what is left.

Crash safety is the store's usual: every step is one index transaction, and
files are removed only after it commits (shares through pending_unlinks, an
archive file without its row by recovery at the next open).

Times are seconds on the node's lease clock, which the caller passes in: the
store has no clock of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from flud.storage.tarscan import member_span
from flud.storage.validation import check_owner

log = logging.getLogger(__name__)

# Holdings forgotten per purge transaction: bounds how long one purge holds the
# store's lock (and so delays the node's reads) to a few milliseconds.
PURGE_BATCH = 1000


@dataclass(frozen=True)
class LeaseTerms:
    lease: float  # seconds an owner may stay away before its data goes to the trash
    trash: float  # seconds its data then stays in the trash before it is deleted


@dataclass
class SweepReport:
    trashed: list[bytes] = field(default_factory=list)  # owners moved to the trash
    purged: list[bytes] = field(default_factory=list)   # owners whose data was deleted
    freed: int = 0                                       # bytes given back by the purges


class StoreLeases:
    """The lease rows of one ShareStore and the trash they lead to. Thread-safe."""

    def __init__(self, store: Any) -> None:
        """store: the flud.storage.disk.ShareStore that owns this (its lock, index, files)."""
        self._store = store
        self._index = store._index

    def is_trashed(self, owner: bytes) -> bool:
        """No I/O: the store keeps the trashed owners in memory."""
        return owner in self._store._trashed

    def renew(self, owner: bytes, now: float) -> bool:
        """owner was seen at `now`. Returns True if this took its data out of the trash."""
        owner = check_owner(owner)
        with self._store._locked(), self._index.transaction():
            self._index.renew_lease(owner, now)
            restored = owner in self._store._trashed
            self._store._trashed.discard(owner)
        if restored:
            log.info("owner %s is back: its data is out of the trash", owner.hex()[:12])
        return restored

    def lease(self, owner: bytes) -> tuple[float | None, float | None] | None:
        with self._store._locked():
            return self._index.lease(check_owner(owner))

    def credit_downtime(self, now: float, allowance: float) -> float:
        """Called once when a node starts: the time since its last sweep, less
        `allowance` (one sweep interval), was time no owner could renew, and is
        added to every lease. Returns the seconds credited."""
        with self._store._locked(), self._index.transaction():
            last = self._index.last_sweep()
            credit = 0.0 if last is None else max(now - last - allowance, 0.0)
            if credit:
                self._index.credit_leases(credit)
            self._index.set_last_sweep(now)
        if credit:
            log.info("this node was down for %.0f s: every lease is extended by as much", credit)
        return credit

    def sweep(self, now: float, terms: LeaseTerms) -> SweepReport:
        """Trash what ran out at `now`, purge what the trash held long enough.
        Slow when it purges: call it off the reactor thread."""
        report = SweepReport()
        with self._store._locked(), self._index.transaction():
            self._index.date_unknown_leases(now)
            self._index.set_last_sweep(now)
            for owner in self._index.owners_seen_before(now - terms.lease):
                self._index.trash(owner, now)
                report.trashed.append(owner)
            self._store._trashed.update(report.trashed)
            due = self._index.owners_trashed_before(now - terms.trash)
        for owner in report.trashed:
            log.info("owner %s not seen for %.0f days: its data goes to the trash",
                     owner.hex()[:12], terms.lease / 86400)
        for owner in due:
            freed = self._purge(owner, now - terms.trash)
            if freed is not None:
                report.purged.append(owner)
                report.freed += freed
        return report

    # --- purge ----------------------------------------------------------------

    def _still_due(self, owner: bytes, cutoff: float) -> bool:
        lease = self._index.lease(owner)
        return lease is not None and lease[1] is not None and lease[1] < cutoff

    def _purge(self, owner: bytes, cutoff: float) -> int | None:
        """Delete everything owner holds; None if it came back first."""
        store, freed = self._store, 0
        with store._owner_lock(owner):  # no append or compaction of its archive meanwhile
            while True:
                with store._locked():
                    if not self._still_due(owner, cutoff):
                        return None
                    batch = self._index.standalone_keys(owner, PURGE_BATCH)
                    if not batch:
                        break
                    freed += store._delete_shares_locked(owner, batch)
            with store._locked():
                row = self._index.archive(owner)
            while row is not None:
                with store._locked(), self._index.transaction():
                    if not self._still_due(owner, cutoff):
                        return None
                    members = self._index.some_members(row.id, PURGE_BATCH)
                    if members:
                        # Garbage now, in case the owner comes back before the end.
                        self._index.remove_members(row.id, owner, members)
                        self._index.add_garbage(row.id, sum(member_span(length) for _, length in members))
                        continue
                    self._index.remove_archive(row.id)
                store._files.remove(owner)
                store._ledger.remove_used(row.committed_length)
                freed += row.committed_length
                break
            with store._locked(), self._index.transaction():
                if not self._still_due(owner, cutoff):
                    return None
                self._index.remove_lease(owner)
                store._trashed.discard(owner)
        log.info("owner %s stayed in the trash past its time: its data is deleted (%d bytes freed)",
                 owner.hex()[:12], freed)
        return freed
