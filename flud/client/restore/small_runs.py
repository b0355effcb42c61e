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

A file that spans two blocks is a part of a run in each (the larger files
of a bundle often do); its parts are kept (counted, label "parts") until
both runs are in, then joined and opened like any other. Runs are asked
for in the order of their bundles' blocks, so the second part follows soon.

What does not go by runs goes alone, as before (small.py), SMALL_IN_FLIGHT
at once: a file of a block with no holder in the manifest; and, per file,
the files of a run that failed (its node down, stalled or in error: the
share is reported once) and each file that fails its check (rebuilt from k
other shares, the parts it had compared with theirs and a wrong one's
share reported).
"""
import functools
from collections import defaultdict

from twisted.internet import defer

from flud.client.gather import settle_all
from flud.client.repository.segments import FetchFailed
from flud.coding import locate
from flud.errors import UnknownCompression

RUN_GAP = 64 * 1024
RUN_CAP = 1024 * 1024
RUNS_IN_FLIGHT = 16


class Run:
    """A range [start, end) of one primary share block and the files in
    it: members [(entry, content, start, end, split)], offsets in the
    block; split: the _Split of a file that spans two blocks (None: the
    whole file is in this run)."""
    __slots__ = ("holder", "start", "end", "members")

    def __init__(self, holder, start, end, members):
        self.holder, self.start, self.end, self.members = holder, start, end, members

    @property
    def length(self) -> int:
        return self.end - self.start


class _Split:
    """A file whose bytes are in two (or more) runs: the parts in so far."""
    __slots__ = ("entry", "content", "blocks", "parts", "settled", "done", "reserved", "held")

    def __init__(self, entry, content, blocks):
        self.entry, self.content, self.blocks = entry, content, blocks
        self.parts = {}   # block -> its bytes, as its run brought them
        self.settled = 0  # runs in (with the part or without it)
        self.done = None  # a Deferred once the restore waits for it
        self.reserved = 0  # the parts' bytes handed over from their runs' reservations
        self.held = 0      # and those counted beyond them (a file twice in one run)


def plan_runs(items, bundle_of, gap=RUN_GAP, cap=RUN_CAP):
    """(runs, splits, alone) for items [(entry, content)]: the runs of
    primary blocks, in the order of their bundles' blocks; the _Splits of
    files that span blocks (each a member of a run per block); and the
    items that go one by one (a block with no holder). bundle_of(bundle id)
    -> Bundle."""
    blocks = defaultdict(list)  # (bundle id, block) -> [(start, end, entry, content, split)]
    holders = {}                # (bundle id, block) -> its holder
    alone, splits = [], []
    for entry, content in items:
        bundle = bundle_of(content.bundle)
        pieces = locate(content.offset, content.length, bundle.block_length)
        places = []
        for block, _, _ in pieces:
            where = (content.bundle, block)
            if where not in holders:
                holders[where] = next((h for h in bundle.holders if h.index == block), None)
            places.append(where)
        if not pieces or any(holders[where] is None for where in places):
            alone.append((entry, content))
            continue
        split = None
        if len(pieces) > 1:
            split = _Split(entry, content, [block for block, _, _ in pieces])
            splits.append(split)
        for where, (_, start, end) in zip(places, pieces):
            blocks[where].append((start, end, entry, content, split))
    runs = []
    for where in sorted(blocks):
        files = blocks[where]
        files.sort(key=lambda f: (f[0], f[1]))
        run = None
        for start, end, entry, content, split in files:
            if run is None or start > run.end + gap or max(end, run.end) - run.start > cap:
                run = Run(holders[where], start, end, [])
                runs.append(run)
            run.end = max(run.end, end)
            run.members.append((entry, content, start, end, split))
    return runs, splits, alone


class SmallRuns:
    """Restores small files: by runs where it can, alone where not.

    fetcher: a SmallFetch. writer: the restore's FileWriter. transfer: the
    memory transfer the runs' answers, the parts of split files and the
    lone files' bytes are counted on. alone_slots: a DeferredSemaphore
    bounding lone files. failed(entry, error): a file that cannot be
    restored."""

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
        runs, splits, alone = plan_runs(items, self._fetcher.bundle, self._gap, self._cap)
        self.runs = len(runs)
        for split in splits:
            split.done = defer.Deferred()
        work = [self._run_slots.run(self._run, run) for run in runs]
        work += [split.done for split in splits]
        work += [self._alone(entry, self._fetcher.fetch, content) for entry, content in alone]
        return settle_all(work)

    @defer.inlineCallbacks
    def _run(self, run):
        yield self._transfer.reserve(run.length, "runs")
        try:
            data = yield self._fetcher.retrieve_run(run)
        except Exception:  # reported by the fetcher: each file comes from other shares
            self._transfer.unreserve(run.length, "runs")
            block = run.holder.index
            lone = []
            for entry, content, _, _, split in run.members:
                if split is None:
                    lone.append(self._alone(entry, self._fetcher.recover, content))
                else:
                    self._part_in(split, block, None)
            yield settle_all(lone)
            return
        view = memoryview(data)
        items, kept = [], 0
        for entry, content, start, end, split in run.members:
            piece = view[start - run.start:end - run.start]
            if split is None:
                items.append((entry, piece, functools.partial(self._fetcher.open, content)))
                continue
            # Its copy stays counted: out of the run's reservation, which
            # the copy outlives.
            part = bytes(piece)
            take = min(len(part), run.length - kept)
            self._transfer.hand_over(take, "runs", None, "parts")
            if len(part) > take:
                self._transfer.hold(len(part) - take, "parts")
            kept += take
            split.reserved += take
            split.held += len(part) - take
            self._part_in(split, run.holder.index, part)
        written = defer.Deferred()
        self._writer.write(items, written.callback)
        refused = yield written
        if run.length > kept:
            self._transfer.unreserve(run.length - kept, "runs")
        if refused:
            block = run.holder.index
            contents = {id(member[0]): member[1] for member in run.members}
            yield settle_all([self._alone(entry, self._fetcher.recover, contents[id(entry)],
                                          [(block, part)])
                              for entry, part in refused])

    def _part_in(self, split, block, part):
        """A run with a part of a split file is in (part None: it failed);
        once all are, the file is opened, or rebuilt from what came."""
        split.settled += 1
        if part is not None:
            split.parts[block] = part
        if split.settled < len(split.blocks):
            return
        fetched = [(b, split.parts[b]) for b in split.blocks if b in split.parts]
        split.parts = {}
        if len(fetched) == len(split.blocks):
            joined = b"".join(p for _, p in fetched)
            d = self._split_written(split, joined, fetched)
        else:
            d = self._alone(split.entry, self._fetcher.recover, split.content, fetched)
        d.addBoth(self._split_done, split)

    @defer.inlineCallbacks
    def _split_written(self, split, joined, fetched):
        written = defer.Deferred()
        self._writer.write([(split.entry, joined,
                             functools.partial(self._fetcher.open, split.content))],
                           written.callback)
        refused = yield written
        if refused:
            yield self._alone(split.entry, self._fetcher.recover, split.content, fetched)

    def _split_done(self, result, split):
        if split.reserved:
            self._transfer.unreserve(split.reserved, "parts")
        if split.held:
            self._transfer.release(split.held, "parts")
        split.done.callback(result)  # a failure here is a bug: the restore says so

    def _alone(self, entry, fetch, content, *args):
        """fetch(content, *args) -> plaintext, handed to the writer, in a lone
        slot held until it is written; its size reserved from the budget
        first (label "files")."""
        return self._alone_slots.run(self._fetch_alone, entry, fetch, content, *args)

    @defer.inlineCallbacks
    def _fetch_alone(self, entry, fetch, content, *args):
        size = max(content.length, content.size)  # stored, and opened (decompressed)
        yield self._transfer.reserve(size, "files")
        try:
            try:
                plain = yield fetch(content, *args)
            except (FetchFailed, UnknownCompression) as err:  # this file fails, alone
                self._failed(entry, err)
                return
            written = defer.Deferred()
            self._writer.write([(entry, plain, None)], written.callback)
            yield written
        finally:
            self._transfer.unreserve(size, "files")
