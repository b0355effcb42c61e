"""`flud stats`: how much is kept, how much is stored, and where.

Streaming over the trees (never a flattened snapshot): each directory's
record is read once, whatever number of snapshots share it; its subtree's
totals are kept by its record id (a number per distinct directory), so an
unchanged directory of the next snapshot costs a dictionary lookup. What is
held besides: the ids of the distinct contents seen (16 bytes of each, for
the unique and dedup figures) and the bytes per node.

The figures (restic's names where restic has the figure):
  total_size, total_file_count   what a restore of the counted snapshots
                                 writes, summed over them (restic's restore-size)
  unique_size, unique_file_count each distinct content once (files-by-contents)
  total_uncompressed_size        = unique_size: the plaintext of the distinct contents
  stored_size                    what those contents take once compressed and
                                 encrypted, before erasure coding
  compression_ratio              total_uncompressed_size / stored_size
  compression_space_saving       percent saved by compression
  dedup_ratio                    total_size / unique_size
  nodes                          (all snapshots only) bytes of shares on each node:
                                 every bundle of the holder map (small files, the
                                 snapshots' records) and every large file's streams
"""
from twisted.internet import defer

from flud.client.records import (StoredSegment, extent_id, extent_stream_length, extents_of,
                                 holder_rows, stored_bytes, stored_segments_of)
from flud.client.repository.tree_records import DIRECTORY, FILE, LargeRecord, LargeRef, SmallRef

_ID_BYTES = 16   # of a content id kept to tell contents apart (128 bits)


class _Totals:
    __slots__ = ("files", "size", "dirs", "symlinks")

    def __init__(self):
        self.files = self.size = self.dirs = self.symlinks = 0

    def add(self, other) -> None:
        self.files += other.files
        self.size += other.size
        self.dirs += other.dirs
        self.symlinks += other.symlinks


class RepositoryStats:
    """repo: an open Repository; reader: a TreeReader over it;
    on_damaged(path, why): a record that could not be read (left out)."""

    def __init__(self, repo, reader, on_damaged=lambda path, why: None):
        self.repo = repo
        self.reader = reader
        self.on_damaged = on_damaged
        self.snapshots = 0
        self.restore = _Totals()
        self.unique_files = self.unique_size = self.stored = 0
        self._contents = set()
        self._directories = {}      # record id -> _Totals of its subtree
        self._extent_bytes = {}     # node hex -> bytes of large files' share streams
        self._extent_shares = {}    # node hex -> streams

    @defer.inlineCallbacks
    def add_snapshot(self, record):
        self.snapshots += 1
        totals = yield self._directory(record.tree, "")
        self.restore.add(totals)

    @defer.inlineCallbacks
    def _directory(self, blob_id: str, path: str):
        known = self._directories.get(blob_id)
        if known is not None:
            return known
        totals = _Totals()
        try:
            entries = yield self.reader.entries(blob_id)
        except Exception as err:   # BlobDamaged, BadRecord, a fetch that failed
            self.on_damaged(path or ".", str(err))
            return totals
        self._directories[blob_id] = totals   # a cycle meets an empty total, not a loop
        for entry in entries:
            where = f"{path}/{entry.name}" if path else entry.name
            if entry.kind == DIRECTORY:
                totals.dirs += 1
                totals.add((yield self._directory(entry.ref, where)))
            elif entry.kind == FILE:
                totals.files += 1
                totals.size += entry.size
                yield self._content(entry, where)
            else:
                totals.symlinks += 1
        return totals

    @defer.inlineCallbacks
    def _content(self, entry, path: str):
        ref = entry.ref
        if ref is None:
            return
        content_id = ref.key if isinstance(ref, SmallRef) else ref.content
        short = bytes.fromhex(content_id)[:_ID_BYTES]
        if short in self._contents:
            return
        self._contents.add(short)
        self.unique_files += 1
        self.unique_size += entry.size
        if isinstance(ref, SmallRef):
            self.stored += ref.length
            return
        if isinstance(ref, LargeRef):
            try:
                content = LargeRecord.decode((yield self.repo.open_blob(ref.content))).content
            except Exception as err:
                self.on_damaged(path, f"its content record cannot be read: {err}")
                return
            self.stored += stored_bytes(content)
            self._large_shares(content)

    def _large_shares(self, content: dict) -> None:
        for extent in extents_of(content):
            moved = self.repo.cache.extent(extent_id(extent)) if holder_rows(extent) else None
            stream = extent_stream_length(extent)
            for holder in (moved or holder_rows(extent)):
                self._count(holder[2], stream)
        for row in stored_segments_of(content):
            segment = StoredSegment.from_wire(row)
            for holder in segment.holders:
                self._count(holder.node, segment.block_length)

    def _count(self, node: str, size: int) -> None:
        self._extent_bytes[node] = self._extent_bytes.get(node, 0) + size
        self._extent_shares[node] = self._extent_shares.get(node, 0) + 1

    def nodes(self) -> list:
        """[{node, shares, bytes}] of every bundle in the holder map and
        every large file's streams counted, the most bytes first."""
        per = {node: [self._extent_shares[node], size]
               for node, size in self._extent_bytes.items()}
        for bundle_id in self.repo.cache.bundle_ids():
            bundle = self.repo.cache.bundle(bundle_id)
            for holder in bundle.holders:
                counts = per.setdefault(holder.node, [0, 0])
                counts[0] += 1
                counts[1] += bundle.block_length
        rows = [{"node": node, "shares": shares, "bytes": size}
                for node, (shares, size) in per.items()]
        rows.sort(key=lambda r: (-r["bytes"], r["node"]))
        return rows

    def summary(self, with_nodes: bool) -> dict:
        uncompressed, stored = self.unique_size, self.stored
        out = {
            "snapshots_count": self.snapshots,
            "total_size": self.restore.size, "total_file_count": self.restore.files,
            "total_dir_count": self.restore.dirs, "total_symlink_count": self.restore.symlinks,
            "unique_size": uncompressed, "unique_file_count": self.unique_files,
            "total_uncompressed_size": uncompressed, "stored_size": stored,
            "compression_ratio": round(uncompressed / stored, 4) if stored else None,
            "compression_space_saving": (round(100.0 * (1 - stored / uncompressed), 2)
                                         if uncompressed else None),
            "dedup_ratio": (round(self.restore.size / uncompressed, 4)
                            if uncompressed else None),
        }
        if with_nodes:
            nodes = self.nodes()
            on_nodes = sum(n["bytes"] for n in nodes)
            out.update(nodes=nodes, total_node_bytes=on_nodes,
                       expansion_ratio=round(on_nodes / stored, 4) if stored else None)
        return out
