"""Restoring a version-2 snapshot: its tree walked directory by directory,
restored a batch of entries at a time (run.py's Restore does each batch:
small files by block runs, large files block by block).

Each directory entry becomes the entry and content record version 1 wrote
(records.py), so one restore path serves both formats: a small file's
content is the bundle range its entry names (or, after prune moved it, the
holder map's row for its key), a large file's is its large-content record
(with the map's newer holders of an extent, after repair moved shares).
What is held: the open directories' entries, one batch (BATCH_FILES files,
their content records) and the list of directories, whose times are set
last. A directory record that cannot be fetched or opened is reported by
its path and its subtree skipped; the rest is restored.
"""
from twisted.internet import defer

from flud.client.repository.blobs import BlobDamaged
from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.records import DIRECTORY, FILE, SYMLINK, EmptyContent, Entry, SmallContent
from flud.client.restore.delete_extra import check_delete_target, delete_extra
from flud.client.restore.file_writer import RestoreError
from flud.client.restore.meta_restore import LookOnlyMeta, TreeMeta
from flud.client.restore.wanted_paths import Wanted
from flud.client.restore.selection import Selection
from flud.client.repository.tree_records import LargeRef, SmallRef
from flud.client.repository.tree_walk import Damaged, TreeReader
from flud.errors import FludError

BATCH_FILES = 2048   # files restored per batch: the runs of a batch share blocks
EMPTY_ID = "empty"


def wanted_by(paths):
    """wanted(path) for a walk that restores `paths` (names under the
    snapshot): a path asked for, under one, or a directory above one."""
    return Wanted(paths, paths)


class TreeContents:
    """Turns directory entries into version-1 entries and content records.
    repo: an open Repository."""

    def __init__(self, repo):
        self.repo = repo

    @defer.inlineCallbacks
    def entry(self, path: str, entry):
        """(Entry, (content id, content record) or None) of one entry."""
        kind = entry.kind
        if kind == DIRECTORY:
            return Entry(path, DIRECTORY, entry.mode, entry.mtime_ns, 0, ""), None
        if kind == SYMLINK:
            return Entry(path, SYMLINK, entry.mode, entry.mtime_ns, 0, entry.ref), None
        if kind != FILE:   # a FIFO or a device: metadata alone
            return Entry(path, kind, entry.mode, entry.mtime_ns, 0, ""), None
        ref = entry.ref
        # A file with holes: its content is its data ranges end to end
        # (restore/meta_restore.py puts them in place).
        size = entry.size if entry.meta.ranges is None else entry.meta.packed_size()
        if ref is None:
            content = (EMPTY_ID, EmptyContent(0).to_wire())
        elif isinstance(ref, SmallRef):
            content = (ref.key, self.small(ref, size))
        else:
            content = (ref.content, (yield self.large(ref)))
        return Entry(path, FILE, entry.mode, entry.mtime_ns, size, content[0]), content

    def small(self, ref: SmallRef, size: int) -> dict:
        where = self.repo.small_range(ref)   # prune may have repacked it
        return SmallContent(size, ref.key, where.bundle, where.offset, where.length,
                            ref.method or None).to_wire()

    def large(self, ref: LargeRef):
        return self.repo.large_content(ref)   # with repair's newer extent holders


class TreeRestore:
    """restore: a run.Restore (its open/restore_batch/finish/close); repo: an
    open Repository; record: the SnapshotRecord to restore. include,
    exclude: patterns (restore/selection.py); delete: remove what the restored
    directories hold that the snapshot does not (restore/delete_extra.py)."""

    def __init__(self, restore, repo, record, include=(), exclude=(), delete=False,
                 numeric_ids: bool = False):
        """numeric_ids: owners restored by the numbers recorded, never by
        their names (root only: restore/meta_restore.py)."""
        look_only = getattr(restore, "dry_run", False)
        self.meta = (LookOnlyMeta if look_only else TreeMeta)(restore, numeric_ids)
        self.restore = restore
        self.repo = repo
        self.record = record
        self.selection = Selection(include, exclude, record.paths)
        self.delete = delete
        if delete and not restore.overwrite.replaces:
            raise RestoreError("--delete makes DEST's directories match the snapshot: use it "
                               "with --overwrite if-changed (or always, if-newer), not never")
        self.contents = TreeContents(repo)
        self.damaged = []     # (path, why) of records that could not be read
        self._entries, self._records, self._files = [], {}, 0

    @defer.inlineCallbacks
    def run(self, dest, paths=()):
        reader = TreeReader(self.repo.fetch_sealed, self.repo.sealer,
                            fetch_many=self.repo.fetch_sealed_many,
                            weigh=self.repo.sealed_size)
        wanted = Wanted(paths, snapshot_paths(self.record.paths, paths))
        self._wanted = wanted
        if self.delete:
            check_delete_target(dest, self.restore.ctx.home.path)
        if wanted or self.selection:
            totals = yield self._count(reader, wanted)
            if wanted:
                self.restore.asked_for(wanted)   # each PATH that matched nothing is reported
        else:
            totals = (self.record.stats.get("files", 0), self.record.stats.get("bytes", 0))
        self.restore.open(dest, totals[0], totals[1])
        try:
            yield reader.walk(self.record.tree, self._visit, self._damaged, wanted=wanted,
                              descend=self._descend,
                              listed=self._listed if self.delete else None)
            yield self._flush()
            self.meta.finish()
            yield self.restore.finish()
        finally:
            self.restore.close()
        return self.restore.summary

    @defer.inlineCallbacks
    def _count(self, reader, wanted):
        counts = [0, 0, 0]   # files, bytes, other entries

        def visit(path, entry):
            wanted.saw(path)
            if not self.selection.wants(path, entry.kind == DIRECTORY):
                return
            if entry.kind == FILE:
                counts[0] += 1
                counts[1] += entry.size
            else:
                counts[2] += 1
        yield reader.walk(self.record.tree, visit,
                          lambda damaged: wanted.unreadable(damaged.path), wanted=wanted,
                          descend=self._descend)
        return counts

    def _descend(self, path, dir_entry) -> bool:
        return self.selection.descends(path)

    def _listed(self, prefix, entries):
        """--delete: what DEST/prefix holds beyond the snapshot's entries goes,
        in a directory at or under a PATH asked for (never DEST's top)."""
        if (not prefix or self.restore.dest is None or not self._wanted.within(prefix)
                or not self.selection.descends(prefix)):
            return None   # (no dest: a dry run into a DEST not there yet)
        kinds = {e.name: e.kind == DIRECTORY for e in entries}
        d = self.restore.ctx.pool.run(delete_extra, self.restore.dest, prefix, kinds,
                                      self.selection.wants if self.selection else _everything,
                                      getattr(self.restore, "dry", False))
        return d.addCallback(self.restore.deleted)

    def _damaged(self, damaged):
        self.damaged.append((damaged.path, damaged.why))
        self.restore.summary["failed"] += 1
        self.restore.failed.append((damaged.path, f"cannot be read: {damaged.why}"))

    @defer.inlineCallbacks
    def _visit(self, path, dir_entry):
        if self.selection and not self.selection.wants(path, dir_entry.kind == DIRECTORY):
            if dir_entry.kind == DIRECTORY:   # made only if something under it is
                self.restore.maybe_dir(path, dir_entry.mode, dir_entry.mtime_ns)
            return
        if self.meta.takes(path, dir_entry):
            return    # a FIFO, a device, a later hard link: no content to fetch
        try:
            entry, content = yield self.contents.entry(path, dir_entry)
        except (BlobDamaged, FludError) as err:
            self._damaged(Damaged(path, str(err)))
            return
        self._entries.append(self.meta.carry(entry, dir_entry))
        if content is not None:
            self._records[content[0]] = content[1]
            self._files += 1
        if self._files >= BATCH_FILES:
            yield self._flush()

    @defer.inlineCallbacks
    def _flush(self):
        entries, records = self._entries, self._records
        self._entries, self._records, self._files = [], {}, 0
        if entries:
            yield self.restore.restore_batch(entries, records)
        self.meta.after_batch()


def _everything(path, is_dir) -> bool:
    return True
