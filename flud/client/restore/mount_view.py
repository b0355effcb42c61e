"""The read-only view `flud mount` shows, as async functions of a path:

    /                      snapshots/  latest -> snapshots/ID (the newest)
    /snapshots/            one directory per snapshot, named by its id
    /snapshots/ID/...      the snapshot's tree

A path is resolved one directory record at a time, from the snapshot's
root down (TreeReader.entries: a record and its continuations); the
directories met are kept in a cache of DIRECTORY_CACHE records, so `ls -R`
reads each record once and memory follows the cache, not the tree. Files
are read by range (fileread.FileReader). The FUSE glue (flud/cli/mount.py)
calls these from its threads through the reactor.
"""
import collections
import errno
import stat
from typing import NamedTuple, Optional

from twisted.internet import defer

from flud.client.repository.tree_records import DIRECTORY, FILE, SYMLINK

DIRECTORY_CACHE = 512   # directory records (each up to 4096 entries) kept


class Node(NamedTuple):
    """What getattr needs of a path: kind ("d", "f", "l"), mode, mtime_ns,
    size, the DirEntry of a snapshot's entry (None for the top levels),
    the symlink target of `latest`."""
    kind: str
    mode: int
    mtime_ns: int
    size: int
    entry: object = None
    target: Optional[str] = None

    def attributes(self, uid: int, gid: int) -> dict:
        """stat's fields (times in nanoseconds)."""
        kind = {DIRECTORY: stat.S_IFDIR, FILE: stat.S_IFREG, SYMLINK: stat.S_IFLNK}[self.kind]
        mode = self.mode & 0o7777
        if self.kind != SYMLINK:
            mode &= ~0o222   # read-only
        size = self.size if self.kind == FILE else len(self.target or "") if \
            self.kind == SYMLINK else 0
        if self.kind == SYMLINK and self.entry is not None:
            size = len(self.entry.ref.encode("utf-8", "surrogateescape"))
        return {"st_mode": kind | mode, "st_nlink": 2 if self.kind == DIRECTORY else 1,
                "st_size": size, "st_mtime": self.mtime_ns, "st_ctime": self.mtime_ns,
                "st_atime": self.mtime_ns, "st_uid": uid, "st_gid": gid,
                "st_blocks": (size + 511) // 512}


class NotFound(OSError):
    def __init__(self, path):
        super().__init__(errno.ENOENT, f"no such entry: {path}")


class MountView:
    """records: [(blob id, SnapshotRecord)] oldest first; reader: a
    TreeReader; files: a FileReader."""

    def __init__(self, records, reader, files):
        self.snapshots = {str(r.snapshot_id): r for _, r in records}
        self.latest = str(records[-1][1].snapshot_id) if records else None
        self.reader = reader
        self.files = files
        self._dirs = collections.OrderedDict()   # record id -> {name: DirEntry}
        newest = max((r.time for _, r in records), default=0)
        self._top = Node(DIRECTORY, 0o555, int(newest * 1e9), 0)

    @defer.inlineCallbacks
    def _entries(self, blob_id: str) -> dict:
        found = self._dirs.get(blob_id)
        if found is not None:
            self._dirs.move_to_end(blob_id)
            return found
        entries = yield self.reader.entries(blob_id)
        found = self._dirs[blob_id] = {e.name: e for e in entries}
        while len(self._dirs) > DIRECTORY_CACHE:
            self._dirs.popitem(last=False)
        return found

    def _parts(self, path: str) -> list:
        return [p for p in path.split("/") if p]

    @defer.inlineCallbacks
    def node(self, path: str) -> Node:
        parts = self._parts(path)
        if not parts or parts == ["snapshots"]:
            return self._top
        if parts == ["latest"] and self.latest is not None:
            return Node(SYMLINK, 0o777, self._top.mtime_ns, 0,
                        target=f"snapshots/{self.latest}")
        if parts[0] != "snapshots" or parts[1] not in self.snapshots:
            raise NotFound(path)
        record = self.snapshots[parts[1]]
        if len(parts) == 2:
            return Node(DIRECTORY, 0o555, int(record.time * 1e9), 0)
        blob_id = record.tree
        entry = None
        for i, name in enumerate(parts[2:]):
            if entry is not None:
                if entry.kind != DIRECTORY:
                    raise NotFound(path)
                blob_id = entry.ref
            entry = (yield self._entries(blob_id)).get(name)
            if entry is None:
                raise NotFound(path)
        return Node(entry.kind, entry.mode, entry.mtime_ns, entry.size, entry)

    @defer.inlineCallbacks
    def list(self, path: str) -> list:
        """The names in a directory (one record and its continuations)."""
        parts = self._parts(path)
        if not parts:
            return ["snapshots"] + (["latest"] if self.latest is not None else [])
        if parts == ["snapshots"]:
            return sorted(self.snapshots, key=int)
        node = yield self.node(path)
        if node.kind != DIRECTORY:
            raise OSError(errno.ENOTDIR, f"not a directory: {path}")
        blob_id = self.snapshots[parts[1]].tree if len(parts) == 2 else node.entry.ref
        return list((yield self._entries(blob_id)))

    @defer.inlineCallbacks
    def open(self, path: str) -> Node:
        """The node of a file to read (its reads then skip the path)."""
        node = yield self.node(path)
        if node.kind != FILE:
            raise OSError(errno.EISDIR, f"not a file: {path}")
        return node

    def read_node(self, node: Node, offset: int, size: int):
        """Deferred: bytes [offset, offset+size) of an opened file."""
        return self.files.read(node.entry, offset, size)

    @defer.inlineCallbacks
    def read(self, path: str, offset: int, size: int) -> bytes:
        node = yield self.open(path)
        data = yield self.read_node(node, offset, size)
        return data

    @defer.inlineCallbacks
    def readlink(self, path: str) -> str:
        node = yield self.node(path)
        if node.kind != SYMLINK:
            raise OSError(errno.EINVAL, f"not a symlink: {path}")
        return node.target if node.entry is None else node.entry.ref
