"""`flud backup`: scan, skip what is unchanged, send the rest, write a snapshot.

Small files (small.py): encrypted one by one (convergent) into the
aggregator, which codes bundles and fills one tar per destination node;
each sealed tar is one STORE. Large files (large.py): in extents, one
streamed STORE per node per extent (flud/client/extents.py), from one
segment's footprint per file used in two halves. Both go at once. What
lands is written to the local index as it lands, so an interrupted run can
be run again and sends only what is missing. At the end the manifest is
published (publish.py).

Memory: every buffer comes out of the process budget (flud/memory.py)
before it exists. A large file reserves its segment (kind "upload"); the
small files reserve credit for the aggregator to grow into (small.py); the
TLS send queues have their allowance (Network.count_sends).

The run owns its tallies (`summary`, `counters`): the parts update them on
the reactor thread only (a worker returns its counts with its result).
"""
import time

from twisted.internet import defer

from flud.client.backup.contents import ContentLog
from flud.client.backup.large import LargeFiles
from flud.client.backup.publish import publish
from flud.client.backup.small import SmallFiles
from flud.client.context import JobContext
from flud.client.gather import settle_all
from flud.client.manifest import entries_for
from flud.client.records import EmptyContent
from flud.client.scan import scan
from flud.coding import SegmentCoder

LARGE_FILES_AT_ONCE = 3      # large files uploading at once
EMPTY = EmptyContent(0)


class Backup:
    def __init__(self, reactor, home, network, pool, monitor, progress, clock=time.monotonic,
                 parallel_files=None, small_files=SmallFiles, large_files=LargeFiles):
        """small_files, large_files: the classes of the two parts (SmallFiles
        and LargeFiles, or ones that watch them)."""
        cfg = home.config
        self.ctx = JobContext(reactor, home, network, pool, monitor, progress,
                              SegmentCoder(cfg["k"], cfg["n"]), clock)
        self.segment_size = cfg["segment_size"]
        self.parallel_files = parallel_files or LARGE_FILES_AT_ONCE
        self.counters = {"bytes_sent": 0, "stores": 0, "tars": 0, "bytes_read": 0}
        self.summary = {"new": 0, "changed": 0, "unchanged": 0, "skipped": 0, "dedup": 0}
        self.skipped = []
        self.contents = ContentLog()
        self.large = large_files(self.ctx, self.segment_size, self.parallel_files,
                                 self.contents, self.counters, self.summary)
        self.small = small_files(self.ctx, cfg["small_file_limit"], self.large.segment_footprint,
                                 self.parallel_files, self.contents, self.counters, self.summary,
                                 self._skip)

    @property
    def policy(self):
        """The small files' flush policy (its bound comes out of the budget)."""
        return self.small.policy

    @property
    def segment_window(self) -> int:
        return self.large.segment_window

    @defer.inlineCallbacks
    def run(self, paths, excludes=()):
        ctx = self.ctx
        index = ctx.index
        started = ctx.clock()
        found = scan(paths, excludes)
        for path, why in found.skipped:
            self._skip(path, why)
        states = index.file_states()
        self.contents.begin(index.known_contents())
        known = self.contents.known
        files = []
        content_of = {}
        for entry in found.files:
            state = states.get(entry.path)
            if state and state.unchanged(entry) and state.content_id in known:
                content_of[entry.path] = state.content_id
                self.summary["unchanged"] += 1
            else:
                files.append(entry)
                self.summary["changed" if state else "new"] += 1
        ctx.progress.start(len(files), sum(e.size for e in files))
        small_file_limit = self.small.policy.small_file_limit
        small = [e for e in files if 0 < e.size < small_file_limit]
        large = [e for e in files if e.size >= small_file_limit]
        for entry in files:
            if entry.size == 0:
                content_of[entry.path] = self.contents.remember("empty", EMPTY)
                ctx.progress.file_done(0)
        # Small files and large files go at once: their CPU work shares the
        # pool, and the nodes' round trips of one overlap the other's CPU.
        sends = ctx.network.count_sends(ctx.monitor, keep=self.large.segment_footprint)
        try:
            self.small.open(with_files=bool(small))
            try:
                yield settle_all([self.small.send_all(small, content_of),
                                  self.large.send_all(large, content_of, self._skip)])
                yield self.small.finish()
            finally:
                self.small.close()
            self._save_contents()
            index.record_files(
                (e.path, e.size, e.mtime_ns, e.ctime_ns, e.inode, content_of[e.path])
                for e in found.files if e.path in content_of)
            entries = entries_for(found, content_of, paths)
            snapshot = yield publish(ctx, entries, paths, started, self.segment_size,
                                     self.summary, self.counters)
        finally:
            sends.close()
        ctx.progress.finish()
        return snapshot

    def _save_contents(self):
        bundles, challenges = self.small.records()
        index = self.ctx.index
        index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
        index.add_contents((cid, c.to_wire()) for cid, c in self.contents.new.items())
        # one row a share, streamed in: the manifest reads them back the same way
        index.add_challenges(challenges.items())
        self.contents.new = {}

    def _skip(self, path, why):
        self.summary["skipped"] += 1
        self.skipped.append((path, why))
        self.ctx.progress.warn(f"skipped {path}: {why}")
