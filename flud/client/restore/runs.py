"""A restore's small files by runs of a share block, not one by one.

The files of a bundle lie side by side in its k primary share blocks, and
the files of a directory usually sit in few bundles. So the files to
restore are grouped by bundle and primary block, sorted by offset, and
ranges closer than RUN_GAP are joined into runs of at most RUN_CAP bytes:
one ranged RETRIEVE per run from the block's holder, its answer cut into
files, each opened (decrypted and checked against its convergent key) and
written by the writer's threads (files.py), a batch made durable at a time.

RUN_GAP, 64 KiB: a RETRIEVE costs the node a request's dispatch, an index
lookup and a file open, and the client a round trip and a reactor turn,
about a millisecond in all on a loaded testnet; 64 KiB more of a range
cost ~0.2 ms at the ~300 MB/s a restore moves. A gap appears only where a
bundle holds files this restore does not want (a partial restore, files
of an older snapshot). RUN_CAP, 1 MiB: a run is then at most a block at
the default sizes (a 1 MiB bundle in k blocks), and the memory a run holds
is bounded whatever k is. RUNS_IN_FLIGHT runs at once, each reserved from
the memory budget before it is asked for (label "runs" on the restore's
"small files" transfer) and given back once its files are written: at
most 16 MiB, usually 16 blocks of 256 KiB, enough to keep a dozen nodes
busy.

What does not go by runs goes alone, as before (small.py), SMALL_IN_FLIGHT
at once: a file that spans two blocks, or whose block has no holder in the
manifest; and, per file, the files of a run that failed (its node down,
stalled or in error: the share is reported once) and each file that fails
its check (rebuilt from k other shares, its share reported if its bytes
were wrong).
"""
import functools
from collections import defaultdict

from twisted.internet import defer

from flud.client.gather import settle_all
from flud.client.segments import FetchFailed
from flud.coding import locate

RUN_GAP = 64 * 1024
RUN_CAP = 1024 * 1024
RUNS_IN_FLIGHT = 16


class Run:
    """A range [start, end) of one primary share block and the files in
    it: members [(entry, content, start, end)], offsets in the block."""
    __slots__ = ("holder", "start", "end", "members")

    def __init__(self, holder, start, end, members):
        self.holder, self.start, self.end, self.members = holder, start, end, members

    @property
    def length(self) -> int:
        return self.end - self.start


def plan_runs(items, bundle_of, gap=RUN_GAP, cap=RUN_CAP):
    """(runs, alone) for items [(entry, content)]: the runs of primary
    blocks, and the items that go one by one (spanning two blocks, or a
    block with no holder). bundle_of(bundle id) -> Bundle."""
    blocks = defaultdict(list)  # (bundle id, block) -> [(start, end, entry, content)]
    holders = {}                # (bundle id, block) -> its holder
    alone = []
    for entry, content in items:
        bundle = bundle_of(content.bundle)
        pieces = locate(content.offset, content.length, bundle.block_length)
        if len(pieces) != 1:
            alone.append((entry, content))
            continue
        block, start, end = pieces[0]
        where = (content.bundle, block)
        if where not in holders:
            holders[where] = next((h for h in bundle.holders if h.index == block), None)
        if holders[where] is None:
            alone.append((entry, content))
            continue
        blocks[where].append((start, end, entry, content))
    runs = []
    for where, files in blocks.items():
        files.sort(key=lambda f: (f[0], f[1]))
        run = None
        for start, end, entry, content in files:
            if run is None or start > run.end + gap or max(end, run.end) - run.start > cap:
                run = Run(holders[where], start, end, [])
                runs.append(run)
            run.end = max(run.end, end)
            run.members.append((entry, content, start, end))
    return runs, alone


class SmallRuns:
    """Restores small files: by runs where it can, alone where not.

    fetcher: a SmallFetch. writer: the restore's FileWriter. transfer: the
    memory transfer the runs' answers and the lone files' bytes are counted
    on. alone_slots: a DeferredSemaphore bounding lone files. failed(entry,
    error): a file that cannot be restored."""

    def __init__(self, fetcher, writer, transfer, alone_slots, failed,
                 runs_in_flight=RUNS_IN_FLIGHT, gap=RUN_GAP, cap=RUN_CAP):
        self._fetcher = fetcher
        self._writer = writer
        self._transfer = transfer
        self._alone_slots = alone_slots
        self._failed = failed
        self._run_slots = defer.DeferredSemaphore(runs_in_flight)
        self._gap, self._cap = gap, cap
        self.runs = 0  # runs planned

    def restore(self, items) -> defer.Deferred:
        """Fires once every file of items [(entry, content)] is with the
        writer (or failed)."""
        runs, alone = plan_runs(items, self._fetcher.bundle, self._gap, self._cap)
        self.runs = len(runs)
        work = [self._run_slots.run(self._run, run) for run in runs]
        work += [self._alone(entry, self._fetcher.fetch, content) for entry, content in alone]
        return settle_all(work)

    @defer.inlineCallbacks
    def _run(self, run):
        yield self._transfer.reserve(run.length, "runs")
        try:
            data = yield self._fetcher.retrieve_run(run)
        except Exception:  # reported by the fetcher: each file comes from other shares
            self._transfer.unreserve(run.length, "runs")
            block = self._block_of(run)
            yield settle_all([self._alone(entry, self._fetcher.recover, content, block)
                              for entry, content, _, _ in run.members])
            return
        view = memoryview(data)
        items = [(entry, view[start - run.start:end - run.start],
                  functools.partial(self._fetcher.open, content))
                 for entry, content, start, end in run.members]
        written = defer.Deferred()
        self._writer.write(items, written.callback)
        refused = yield written
        self._transfer.unreserve(run.length, "runs")
        if refused:
            block = self._block_of(run)
            contents = {id(entry): content for entry, content, _, _ in run.members}
            yield settle_all([self._alone(entry, self._fetcher.recover, contents[id(entry)],
                                          block, part)
                              for entry, part in refused])

    def _block_of(self, run) -> int:
        return run.holder.index

    def _alone(self, entry, fetch, content, *args):
        """fetch(content, *args) -> plaintext, handed to the writer, in a lone
        slot held until it is written; its size reserved from the budget
        first (label "files")."""
        return self._alone_slots.run(self._fetch_alone, entry, fetch, content, *args)

    @defer.inlineCallbacks
    def _fetch_alone(self, entry, fetch, content, *args):
        size = content.length
        yield self._transfer.reserve(size, "files")
        try:
            try:
                plain = yield fetch(content, *args)
            except FetchFailed as err:
                self._failed(entry, err)
                return
            written = defer.Deferred()
            self._writer.write([(entry, plain, None)], written.callback)
            yield written
        finally:
            self._transfer.unreserve(size, "files")
