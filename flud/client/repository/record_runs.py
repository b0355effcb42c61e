"""Several records in one RETRIEVE: the ranges of blobs asked for at once,
joined by bundle block (as a restore's small files are: restore/small_runs.py).

A backup seals its records in walk order into the bundles beside its small
files, so the records a tree reader asks for at once (a directory's
subdirectories, fetched ahead of the walk: repository/tree_walk.py) sit in a
few blocks of a few bundles, close together. Asked one RETRIEVE each, a
restore without the record cache (a new machine, the key alone) made one
round trip, one node dispatch and one index lookup per directory. Here the
ranges that lie in one primary block are sorted and joined where the gap
between two is at most RUN_GAP and the run at most RUN_CAP, and each run is
one ranged RETRIEVE from the block's holder, cut into its records.

Each record is then checked exactly as one fetched alone (the reader's
opener: its address); one that fails its check, or whose run failed, is
rebuilt from other shares (BundleRangeReader.recover, which reports the
share). A range that spans two blocks, or whose block has no holder, goes
alone (BundleRangeReader.fetch). Memory: a run holds the records asked for
and the gaps between them (at most RUN_GAP each), no more than the caller's
bound on what it asks at once allows.
"""
from typing import NamedTuple

from twisted.internet import defer

from flud.coding import locate

RUN_GAP = 64 * 1024     # bytes of other data a run may carry between two records
RUN_CAP = 1024 * 1024   # the most one run asks for


class _Run(NamedTuple):
    holder: object   # ShareHolder of the block
    start: int
    end: int


class _Ask(NamedTuple):
    start: int
    end: int
    block: int
    content: object   # SmallContent: the blob's id (key), bundle, offset, length
    done: defer.Deferred


def fetch_runs(reader, contents) -> list:
    """[Deferred of the checked bytes of each content] (SmallContent of a
    blob: key, bundle, offset, length), in order; reader: a
    BundleRangeReader. Those in one block close together share a RETRIEVE."""
    done = [defer.Deferred() for _ in contents]
    by_block = {}
    for content, d in zip(contents, done):
        try:
            bundle = reader.bundle(content.bundle)
            pieces = locate(content.offset, content.length, bundle.block_length)
        except Exception:   # a record the map cannot place: it fails alone, as it did
            _alone(reader, content, d)
            continue
        holder = next((h for h in bundle.holders if len(pieces) == 1
                       and h.index == pieces[0].block_index), None)
        if holder is None:
            _alone(reader, content, d)
            continue
        piece = pieces[0]
        by_block.setdefault((content.bundle, holder), []).append(
            _Ask(piece.start, piece.end, piece.block_index, content, d))
    for (_, holder), asks in by_block.items():
        for run in _runs(sorted(asks, key=lambda a: (a.start, a.end))):
            _fetch_run(reader, holder, run)
    return done


def _runs(asks):
    run = [asks[0]]
    start, end = asks[0].start, asks[0].end
    for ask in asks[1:]:
        if ask.start - end <= RUN_GAP and max(end, ask.end) - start <= RUN_CAP:
            run.append(ask)
            end = max(end, ask.end)
            continue
        yield run
        run, start, end = [ask], ask.start, ask.end
    yield run


def _alone(reader, content, d) -> None:
    defer.maybeDeferred(reader.fetch, content).chainDeferred(d)


def _fetch_run(reader, holder, run) -> None:
    if len(run) == 1:
        _alone(reader, run[0].content, run[0].done)
        return
    start = run[0].start
    end = max(ask.end for ask in run)

    def got(data):
        view = memoryview(data)
        for ask in run:
            part = view[ask.start - start:ask.end - start]
            try:
                opened = reader.open(ask.content, part) if len(part) == ask.end - ask.start \
                    else None
            except Exception:   # never a walk left waiting on a record
                opened = None
            if opened is not None:
                ask.done.callback(opened)
            else:   # its part is wrong: rebuilt from other shares, the share reported
                reader.recover(ask.content, [(ask.block, bytes(part))]).chainDeferred(ask.done)

    def failed(failure):   # reported once (retrieve_run); each record from other shares
        for ask in run:
            reader.recover(ask.content).chainDeferred(ask.done)

    reader.retrieve_run(_Run(holder, start, end)).addCallbacks(got, failed)
