"""A version-2 snapshot's tree, built bottom-up as the walk hands over each
directory (docs/snapshots.md).

The walk (client/backup/source_walk.py) hands over a directory once everything below it
was handed over, so its subdirectories' records are already made: their blob
ids wait here until their parent takes them, and that is all that is held
besides the directory itself. Each record is encoded, sealed (client/repository/blobs.py)
and handed to store(blob id, sealed bytes) unless known(blob id) says it is
stored already: an unchanged directory costs a hash, not a STORE.
"""
import os
from typing import Callable

from flud.client.repository.entry_meta import EMPTY_META
from flud.client.repository.tree_records import (DIRECTORY, FILE, SYMLINK, DirEntry,
                                                directory_records)


class TreeBuilder:
    """sealer: a BlobSealer. known(blob id hex) -> bool: stored already.
    store(blob id hex, sealed): a new blob to send (with the small files)."""

    def __init__(self, sealer, known: Callable, store: Callable,
                 meta_of: Callable = lambda entry: EMPTY_META):
        """meta_of(entry) -> meta.Meta of a walk entry (once its ref is known)."""
        self._meta_of = meta_of
        self._sealer = sealer
        self._known = known
        self._store = store
        self._finished = {}   # directory path -> its record's blob id, until its parent takes it
        self.records = 0      # records made
        self.stored = 0       # of them, new

    def directory(self, listing, file_ref: Callable) -> str:
        """The blob id of one directory's record. listing: a walk.Directory;
        file_ref(entry) -> the ref of a file entry (SmallRef, LargeRef, or
        None when empty); an entry whose ref is missing is left out (it could
        not be read)."""
        entries = []
        for entry in listing.entries:
            if entry.kind == DIRECTORY:
                ref = self._finished.pop(entry.path, None)
                if ref is None:
                    continue  # it could not be listed: said when it was walked
            elif entry.kind == SYMLINK:
                ref = entry.target
            elif entry.kind != FILE:
                ref = None    # a FIFO or a device: metadata alone
            else:
                try:
                    ref = file_ref(entry)
                except KeyError:
                    continue  # skipped while reading: said then
            entries.append(DirEntry(os.path.basename(entry.path), entry.kind,
                                    entry.mode, entry.mtime_ns, entry.size, ref,
                                    self._meta_of(entry)))
        blob_id = self._seal(entries)
        self._finished[listing.path] = blob_id
        return blob_id

    def reuse(self, path: str, blob_id: str) -> None:
        """A directory whose record is known and unchanged: its parent takes
        blob_id without it being read."""
        self._finished[path] = blob_id

    def root(self, tops) -> str:
        """The blob id of the snapshot's root directory: tops are the
        (name, walk entry of a backed-up path, its ref) of each path."""
        entries = [DirEntry(name, entry.kind, entry.mode, entry.mtime_ns, entry.size,
                            self._finished.pop(entry.path) if entry.kind == DIRECTORY else ref,
                            self._meta_of(entry))
                   for name, entry, ref in tops]
        return self._seal(entries)

    def _seal(self, entries) -> str:
        first, *rest = directory_records(entries)
        more = tuple(self._put(record) for record in rest)
        return self._put(first._replace(more=more))

    def _put(self, record) -> str:
        blob_id, sealed = self._sealer.seal(record.encode())
        blob_id = blob_id.hex()
        self.records += 1
        if not self._known(blob_id):
            self.stored += 1
            self._store(blob_id, sealed)
        return blob_id
