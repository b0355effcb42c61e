"""When a node compacts an owner's archive: once a burst of DELETEs is over.

A prune sends its DELETEs in a burst. Compacting inside the DELETE that
takes an archive past the threshold (as the store does on its own) would,
in a prune that kills most of an archive, rewrite it again and again: each
compaction leaves a smaller archive that the next deletes take past the
threshold once more. Killing 90% of an archive that way copies ~3.5x its
size at a threshold of 0.2; one compaction at the end copies the 10% left.
So the node deletes without compacting and compacts an owner's archive
QUIET seconds after that owner's last DELETE, or MAX_WAIT after its first
one not yet compacted, whichever comes first (a prune that goes on for
minutes still has its space back every minute), in a worker.

At start the node also compacts every archive already past the threshold:
one whose compaction a crash interrupted, or one whose DELETEs came just
before a stop.
"""
import logging

log = logging.getLogger("flud.compaction")

QUIET = 2.0
MAX_WAIT = 60.0


class CompactionScheduler:
    def __init__(self, store, clock, run_blocking, quiet: float = QUIET, max_wait: float = MAX_WAIT):
        self._store = store
        self._clock = clock
        self._run_blocking = run_blocking
        self.quiet = quiet
        self.max_wait = max_wait
        # owner -> [DelayedCall, time of its first DELETE not yet compacted];
        # one entry per owner with DELETEs waiting, gone once compacted.
        self._pending = {}
        self._running = set()  # owners being compacted now
        self.counters = {"compactions": 0, "reclaimed_bytes": 0, "compaction_errors": 0}

    def deleted(self, owner: bytes) -> None:
        """owner's DELETE was done: (re)arm its compaction."""
        now = self._clock.seconds()
        entry = self._pending.get(owner)
        if entry is None:
            self._pending[owner] = [self._clock.callLater(self.quiet, self._due, owner), now]
            return
        call, first = entry
        delay = max(min(self.quiet, first + self.max_wait - now), 0)
        if call.active():
            call.reset(delay)

    def start(self):
        """Compact whatever is already past the threshold; returns a Deferred."""
        d = self._run_blocking(self._store.compactions_due)
        d.addCallback(lambda owners: [self._compact(owner) for owner in owners])
        d.addErrback(lambda f: log.warning("could not list archives to compact: %s",
                                           f.getErrorMessage()))
        return d

    def stop(self) -> None:
        for call, _ in self._pending.values():
            if call.active():
                call.cancel()
        self._pending.clear()

    def _due(self, owner: bytes) -> None:
        del self._pending[owner]
        if owner in self._running:  # a compaction runs: deleted() again once it ends
            self.deleted(owner)
            return
        self._compact(owner)

    def _compact(self, owner: bytes):
        self._running.add(owner)
        d = self._run_blocking(self._compact_if_due, owner)

        def done(reclaimed):
            if reclaimed:
                self.counters["compactions"] += 1
                self.counters["reclaimed_bytes"] += reclaimed

        def failed(failure):  # the garbage stays; the next DELETE or start tries again
            self.counters["compaction_errors"] += 1
            log.warning("compaction of %s's archive failed: %s", owner.hex()[:12],
                        failure.getErrorMessage())

        d.addCallbacks(done, failed)
        d.addBoth(lambda _: self._running.discard(owner))
        return d

    def _compact_if_due(self, owner: bytes) -> int:
        """In a worker: compact owner's archive if it is (still) past the threshold."""
        if owner not in self._store.compactions_due():
            return 0
        return self._store.compact(owner)

    def stats(self) -> dict:
        return {"pending": len(self._pending), "running": len(self._running), **self.counters}
