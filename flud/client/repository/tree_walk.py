"""Reading a version-2 snapshot's tree, directory by directory.

Restore, `ls`, `find`, `verify` and `diff` all go down a tree the same way:
fetch a directory's record (and its continuation records), open it, hand
over its entries, go down into its subdirectories. Only the records of the
directories on the current path are held. A record that cannot be fetched,
does not open, or is malformed is reported by its path (on_damaged) and its
subtree is skipped; the walk goes on with the rest. A directory that names
one of its own ancestors (a cycle: only a hostile record can make one, since
an address is the hash of what it holds) is refused the same way.

A walk fetches ahead: once a directory is listed, the records of its
subdirectories to be walked are asked for at once (at most PREFETCH held or
in flight, the walk's memory bound), so a tree read from the nodes costs
round trips in parallel, not one directory after another.

diff() walks two trees side by side and never goes into a subtree whose
record is the same blob in both: its cost follows the change.
"""
from typing import Callable, NamedTuple

from twisted.internet import defer

from flud.client.repository.blobs import BlobDamaged
from flud.client.repository.tree_records import DIRECTORY, BadRecord, DirectoryRecord, NewerFormat, name_order
from flud.errors import FludError


class Damaged(NamedTuple):
    """A part of a tree that could not be read: where, and why."""
    path: str
    why: str


class NotADirectory(FludError):
    """A path asked for is not a directory of the snapshot."""

    code = "NOT_A_DIRECTORY"


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


PREFETCH = 16   # directory records a walk fetches ahead (held or in flight)
# ...or, where the reader can weigh records (their sealed lengths are in the
# map), this many bytes of them, at most PREFETCH_WEIGHED records.
PREFETCH_BYTES = 2 * 1024 * 1024
PREFETCH_WEIGHED = 256
UNKNOWN_WEIGHT = 64 * 1024


class _Failed:
    """A fetch ahead that failed, held until the walk takes it."""

    def __init__(self, failure):
        self.failure = failure

    @staticmethod
    def unwrap(result):
        return result.failure if isinstance(result, _Failed) else result


class TreeReader:
    """fetch(blob id hex) -> Deferred[the blob's sealed bytes] (the caller
    finds where it is: the holder map); sealer: a BlobSealer of the user's key."""

    def __init__(self, fetch: Callable, sealer, prefetch: int = PREFETCH,
                 fetch_many: Callable = None, weigh: Callable = None):
        """fetch_many(blob ids) -> {blob id: Deferred[sealed bytes]}, if
        given, fetches what the walk asks ahead at once (records close
        together in a bundle then share a RETRIEVE: Repository.fetch_sealed_many).
        weigh(blob id) -> its sealed bytes (or None: unknown), if given,
        bounds what is held ahead by bytes (PREFETCH_BYTES, at most
        PREFETCH_WEIGHED records) instead of by `prefetch` records: a deep
        tree's unvisited siblings then leave room to ask for a directory's
        subdirectories together."""
        self._fetch = fetch
        self._fetch_many = fetch_many
        self._weigh = weigh
        self._sealer = sealer
        self._prefetch = prefetch if weigh is None else PREFETCH_WEIGHED
        self._ahead = {}   # blob id -> Deferred[sealed bytes], fetched ahead of the walk
        self._weights = {}  # blob id -> bytes counted for it (weigh given)
        self._ahead_bytes = 0

    def _fetch_ahead(self, blob_ids) -> None:
        todo = []
        for blob_id in blob_ids:
            if len(self._ahead) + len(todo) >= self._prefetch:
                break
            if blob_id in self._ahead or blob_id in todo:
                continue
            if self._weigh is not None:
                weight = self._weigh(blob_id) or UNKNOWN_WEIGHT
                if self._ahead_bytes + weight > PREFETCH_BYTES and (self._ahead or todo):
                    break
                self._weights[blob_id] = weight
                self._ahead_bytes += weight
            todo.append(blob_id)
        if self._fetch_many is not None and len(todo) > 1:
            try:
                fetched = self._fetch_many(todo)
            except Exception:
                fetched = {blob_id: defer.fail() for blob_id in todo}
        else:
            fetched = {blob_id: defer.maybeDeferred(self._fetch, blob_id) for blob_id in todo}
        for blob_id in todo:
            # a failure is held as a value (never an unhandled error if
            # the walk does not get there) and raised when taken
            self._ahead[blob_id] = fetched[blob_id].addErrback(_Failed)

    def _drop(self, blob_id: str):
        """The fetch ahead of blob_id, out of the bound (None if none)."""
        self._ahead_bytes -= self._weights.pop(blob_id, 0)
        return self._ahead.pop(blob_id, None)

    def _take(self, blob_id: str):
        ahead = self._drop(blob_id)
        if ahead is None:
            return self._fetch(blob_id)
        return ahead.addCallback(_Failed.unwrap)

    @defer.inlineCallbacks
    def _record(self, blob_id: str) -> DirectoryRecord:
        sealed = yield self._take(blob_id)
        return DirectoryRecord.decode(self._sealer.open(bytes.fromhex(blob_id), sealed))

    @defer.inlineCallbacks
    def entries(self, blob_id: str) -> list:
        """Every entry of one directory, its continuation records' too."""
        first = yield self._record(blob_id)
        found = list(first.entries)
        self._fetch_ahead(first.more)
        for more in first.more:
            record = yield self._record(more)
            if record.more:
                raise BadRecord("a continuation record with continuations of its own")
            found.extend(record.entries)
        return found

    @defer.inlineCallbacks
    def directory(self, blob_id: str, path: str) -> str:
        """The record id of directory `path` (names joined by '/', "" for
        the root) under the directory whose record is blob_id: one record
        per level fetched, nothing else. NotADirectory if a part is missing
        or is not a directory."""
        for name in [part for part in path.split("/") if part]:
            found = None
            for entry in (yield self.entries(blob_id)):
                if entry.name == name:
                    found = entry
                    break
            if found is None or found.kind != DIRECTORY:
                raise NotADirectory(f"no directory {path!r} in this snapshot"
                                    + (f" ({name!r} is not one)" if found else ""))
            blob_id = found.ref
        return blob_id

    @defer.inlineCallbacks
    def walk(self, blob_id: str, visit: Callable, on_damaged: Callable, prefix: str = "",
             wanted: Callable = lambda path: True, descend: Callable = None,
             listed: Callable = None):
        """Depth first from the directory whose record is blob_id: visit(path, entry) for each
        entry (it may return a Deferred, waited for), a directory's entry
        before what it holds. wanted(path) prunes subtrees nobody asked for;
        descend(path, entry), if given, says whether a directory visited is
        walked into; listed(path, entries), if given, hears each directory's
        entries before they are visited (it may return a Deferred)."""
        yield self._walk(blob_id, prefix, visit, on_damaged, wanted, ancestors=set(),
                         descend=descend, listed=listed)

    @defer.inlineCallbacks
    def _walk(self, blob_id, prefix, visit, on_damaged, wanted, ancestors, descend=None,
              listed=None):
        if blob_id in ancestors:
            on_damaged(Damaged(prefix or ".", "a directory that contains itself (a cycle)"))
            return
        try:
            entries = yield self.entries(blob_id)
        except (BlobDamaged, BadRecord, NewerFormat) as err:
            on_damaged(Damaged(prefix or ".", str(err)))
            return
        except FludError as err:  # a fetch that failed: no holder answered
            on_damaged(Damaged(prefix or ".", f"cannot be fetched: {err}"))
            return
        ancestors.add(blob_id)
        self._fetch_ahead(entry.ref for entry in entries if entry.kind == DIRECTORY
                          and wanted(_join(prefix, entry.name)))
        try:
            if listed is not None:
                yield listed(prefix, entries)
            for entry in entries:
                path = _join(prefix, entry.name)
                if not wanted(path):
                    continue
                yield visit(path, entry)
                if entry.kind == DIRECTORY and (descend is None or descend(path, entry)):
                    yield self._walk(entry.ref, path, visit, on_damaged, wanted, ancestors,
                                     descend, listed)
        finally:
            ancestors.discard(blob_id)
            for entry in entries:   # fetched ahead, not walked into: the slot is freed
                if entry.kind == DIRECTORY:
                    self._drop(entry.ref)

    @defer.inlineCallbacks
    def diff(self, old_id: str, new_id: str, report: Callable, on_damaged: Callable,
             prefix: str = ""):
        """report(change, path, old entry, new entry) with change "+", "-" or
        "M" for every path added, removed or changed between two trees (the
        blob ids of their root directories)."""
        if old_id == new_id:
            return
        try:
            old = yield self.entries(old_id)
            new = yield self.entries(new_id)
        except (BlobDamaged, BadRecord, NewerFormat, FludError) as err:
            on_damaged(Damaged(prefix or ".", str(err)))
            return
        old_by, new_by = {e.name: e for e in old}, {e.name: e for e in new}
        for name in sorted(old_by.keys() | new_by.keys(), key=name_order):
            a, b = old_by.get(name), new_by.get(name)
            path = _join(prefix, name)
            if a == b:
                continue
            if a is None or b is None:
                report("+" if a is None else "-", path, a, b)
                continue
            if a.kind == b.kind == DIRECTORY:
                if (a.mode, a.mtime_ns, a.meta) != (b.mode, b.mtime_ns, b.meta):
                    report("M", path, a, b)
                yield self.diff(a.ref, b.ref, report, on_damaged, path)
                continue
            report("M", path, a, b)
