"""A version-3 snapshot's metadata put back (client/repository/entry_meta.py): owners,
xattrs and ACLs, hard links, holes, FIFOs and devices.

Files: their metadata goes with them through the restore (MetaEntry) and
is applied through the temp file's own descriptor before it is renamed
into place (files.set_meta calls MetaApplier.file): holes first (the
packed content moved to its ranges, sparse.expand), then the owner, the
mode, the xattrs (an ACL after the mode: chmod rewrites the ACL's mask) and
the times last.

Owners are set only by root (anyone else cannot give a file away): by the
name the snapshot recorded where this machine knows it, else by number;
by number alone with --numeric-ids. trusted.* and security.* xattrs are
set only by root too. An xattr the destination refuses (a file system
without xattrs or ACLs, a value too large) leaves the file restored and is
said: counted in the summary's meta_not_set, named in not_set, and the
exit code says something was not done.

Hard links: every link of a file carries the file's content and the
snapshot path of its first link (its group). The first member a restore
meets is restored as a file; each later one becomes a link to it once
every file is written (TreeMeta.finish), so the group is one inode again,
and a restore of part of a tree still gets every file it asked for.
FIFOs and devices are made with mknod after their batch (devices by root
only), directories' owners and xattrs set before their modes and times.
"""
import errno
import grp
import os
import pwd
import stat
import threading

from twisted.internet import defer

from flud.client.records import Entry
from flud.client.restore.destdir import UnsafePath
from flud.client.restore.file_writer import BESIDE_SUFFIX, into_place
from flud.client.sparse import expand
from flud.client.repository.tree_records import (BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO,
                                                FILE, SYMLINK)

NOT_SET_LISTED = 100   # what was not set, named; all of it is counted
_ROOT_ONLY = ("trusted.", "security.")
_NODE_TYPES = {FIFO: stat.S_IFIFO, CHAR_DEVICE: stat.S_IFCHR, BLOCK_DEVICE: stat.S_IFBLK}


class MetaEntry(Entry):
    """A version-1 entry (what the restore writes) with the version-3
    metadata it carries to set_meta: meta (meta.Meta), whole (the file's
    length, of one with holes) and applier (a MetaApplier)."""


def is_root() -> bool:
    return os.geteuid() == 0


class MetaApplier:
    """Applies entries' metadata; thread-safe (the restore's writer threads
    call file()). not_set: [(path, what)] of the first NOT_SET_LISTED things
    that could not be set; not_set_count: how many paths had any."""

    def __init__(self, numeric_ids: bool = False, as_root: bool = None):
        self.numeric_ids = numeric_ids
        self.as_root = is_root() if as_root is None else as_root
        self.not_set, self.not_set_count = [], 0
        self.written = {}   # path -> (dev, inode) of each restored file other links join
        self._lock = threading.Lock()
        self._users, self._groups = {}, {}

    def file(self, fd: int, entry) -> None:
        """A restored file's metadata, through its descriptor (its content
        written): holes, owner, mode, xattrs, times."""
        meta, problems = entry.meta, []
        if meta.link is not None:   # what its later links are made to, whatever its name
            st = os.fstat(fd)
            with self._lock:
                self.written[entry.rel] = (st.st_dev, st.st_ino)
        if meta.ranges is not None:
            _expand(fd, meta.ranges, entry.whole)
        self.owner(fd, meta, problems)
        os.fchmod(fd, entry.mode)
        self.xattrs(fd, meta, problems)
        os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
        self.said(entry.rel, problems)

    def owner(self, target, meta, problems, dir_fd: int = None) -> None:
        """chown target (a descriptor, or a name in dir_fd, never followed)
        to the recorded owner: root only."""
        if meta.owner is None or not self.as_root:
            return
        uid, gid = self.ids(meta.owner)
        try:
            if dir_fd is None:
                os.chown(target, uid, gid)
            else:
                os.chown(target, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as err:
            problems.append(f"owner {uid}:{gid}: {err.strerror}")

    def xattrs(self, fd: int, meta, problems) -> None:
        for name, value in meta.xattrs:
            if name.startswith(_ROOT_ONLY) and not self.as_root:
                continue
            try:
                os.setxattr(fd, name, value)
            except OSError as err:
                problems.append(f"xattr {name}: {err.strerror}")

    def ids(self, owner) -> tuple:
        if self.numeric_ids:
            return owner.uid, owner.gid
        return (_by_name(self._users, owner.user, owner.uid, lambda n: pwd.getpwnam(n).pw_uid),
                _by_name(self._groups, owner.group, owner.gid, lambda n: grp.getgrnam(n).gr_gid))

    def said(self, rel: str, problems) -> None:
        if not problems:
            return
        with self._lock:
            self.not_set_count += 1
            for what in problems:
                if len(self.not_set) < NOT_SET_LISTED:
                    self.not_set.append((rel, what))


def _by_name(cache, name, number, lookup) -> int:
    if not name:
        return number
    found = cache.get(name)
    if found is None:
        try:
            found = lookup(name)
        except KeyError:   # no such user here: the number recorded
            found = number
        cache[name] = found
    return found


def set_large_meta(pool, set_meta, fd: int, entry):
    """Deferred: set_meta(fd, entry) of a large file, on a pool thread when
    it has holes to put back (moving its data is disk work the reactor must
    not wait on), at once otherwise."""
    meta = getattr(entry, "meta", None)
    if meta is not None and meta.ranges:
        return pool.run(set_meta, fd, entry)
    set_meta(fd, entry)
    return defer.succeed(None)


def _expand(fd: int, ranges, whole: int) -> None:
    """The packed content written through fd moved to its ranges: through
    a descriptor of its own that can read (fd may be write-only, or
    O_DIRECT), made durable (the restore's sync came before)."""
    rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    try:
        expand(rw, ranges, whole)
        os.fsync(rw)
    finally:
        os.close(rw)


class TreeMeta:
    """What a version-3 tree's restore does beyond files' contents.
    restore: the run.Restore (its dest, summary, refuse, file_failed)."""

    def __init__(self, restore, numeric_ids: bool = False, as_root: bool = None):
        self.restore = restore
        self.applier = MetaApplier(numeric_ids, as_root)
        self._first = {}      # a link group -> the path its first restored member has
        self._links = []      # (path, its group's first path): made once files are in
        self._nodes = []      # (path, DirEntry): FIFOs and devices of the current batch
        self._symlinks = []   # (path, DirEntry): owners of the current batch's symlinks
        self._dirs = []       # (path, Meta): set before the directories' modes and times
        for key in ("hardlinks", "specials", "meta_not_set"):
            restore.summary.setdefault(key, 0)

    def takes(self, path: str, dir_entry) -> bool:
        """True for an entry done here, not by the restore of contents: a
        FIFO or a device, or a later link of a file already being restored."""
        if dir_entry.kind in _NODE_TYPES:
            self._nodes.append((path, dir_entry))
            return True
        link = dir_entry.meta.link
        if dir_entry.kind == FILE and link is not None:
            first = self._first.get(link)
            if first is not None:
                self._links.append((path, first))
                return True
            self._first[link] = path
        return False

    def carry(self, entry, dir_entry):
        """The entry the restore writes, with what set_meta applies."""
        meta = dir_entry.meta
        if dir_entry.kind == DIRECTORY:
            if meta.owner is not None or meta.xattrs:
                self._dirs.append((entry.rel, meta))
            return entry
        if dir_entry.kind == SYMLINK:
            if meta.owner is not None and self.applier.as_root:
                self._symlinks.append((entry.rel, dir_entry))
            return entry
        if meta.owner is None and not meta.xattrs and meta.ranges is None:
            return entry
        carried = MetaEntry(*entry)
        carried.meta, carried.whole, carried.applier = meta, dir_entry.size, self.applier
        return carried

    def after_batch(self) -> None:
        """The batch's FIFOs and devices made, its symlinks' owners set."""
        nodes, self._nodes = self._nodes, []
        for path, dir_entry in nodes:
            self._node(path, dir_entry)
        symlinks, self._symlinks = self._symlinks, []
        for path, dir_entry in symlinks:
            self._symlink_owner(path, dir_entry)

    def finish(self) -> None:
        """Later links made, directories' owners and xattrs set; the
        summary told what could not be set."""
        links, self._links = self._links, []
        for path, first in links:
            self._link(path, first)
        for path, meta in self._dirs:
            self._dir(path, meta)
        self._dirs = []
        summary = self.restore.summary
        summary["meta_not_set"] = self.applier.not_set_count
        self.restore.not_set = self.applier.not_set
        for path, what in self.applier.not_set:
            self.restore.progress.warn(f"{path}: not set: {what}")

    # ---- each kind

    def _node(self, path, dir_entry) -> None:
        if dir_entry.kind != FIFO and not self.applier.as_root:
            self.applier.said(path, ["a device node: made by root only"])
            return
        kind = _NODE_TYPES[dir_entry.kind]
        device = os.makedev(*dir_entry.meta.device) if dir_entry.meta.device else 0
        try:
            with self.restore.dest.place(path) as place:
                name, beside = into_place(place, lambda name: os.mknod(
                    name, kind | 0o600, device, dir_fd=place.dir_fd))
                problems = []
                self.applier.owner(name, dir_entry.meta, problems, place.dir_fd)
                os.chmod(name, dir_entry.mode, dir_fd=place.dir_fd)
                self._node_xattrs(place, name, dir_entry.meta, problems)
                os.utime(name, ns=(dir_entry.mtime_ns, dir_entry.mtime_ns),
                         dir_fd=place.dir_fd, follow_symlinks=False)
        except UnsafePath as err:
            self.restore.refuse(path, err.why)
            return
        except OSError as err:
            if dir_entry.kind != FIFO and err.errno == errno.EPERM:
                # root without CAP_MKNOD (a container): as for anyone else
                self.applier.said(path, [f"a device node: {err.strerror}"])
                return
            self.restore.file_failed(_named(path), err.strerror or err)
            return
        self.restore.summary["specials"] += 1
        self.restore.summary["beside"] += beside
        self.applier.said(path, problems)

    def _node_xattrs(self, place, name, meta, problems) -> None:
        """A FIFO's or a device's xattrs (ACLs), through an O_PATH descriptor:
        opening the node itself could block or reach the device."""
        if not meta.xattrs:
            return
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.dir_fd)
        try:
            proc = f"/proc/self/fd/{fd}"
            for key, value in meta.xattrs:
                if key.startswith(_ROOT_ONLY) and not self.applier.as_root:
                    continue
                try:
                    os.setxattr(proc, key, value)
                except OSError as err:
                    problems.append(f"xattr {key}: {err.strerror}")
        finally:
            os.close(fd)

    def _symlink_owner(self, path, dir_entry) -> None:
        problems = []
        try:
            with self.restore.dest.place(path) as place:
                st = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
                if (stat.S_ISLNK(st.st_mode)
                        and os.readlink(place.name, dir_fd=place.dir_fd) == dir_entry.ref):
                    self.applier.owner(place.name, dir_entry.meta, problems, place.dir_fd)
        except (UnsafePath, OSError):
            return   # said by the symlink's own restore
        self.applier.said(path, problems)

    def _link(self, path, first) -> None:
        try:
            with self.restore.dest.place(first) as source, \
                    self.restore.dest.place(path) as place:
                name = self._restored_name(source, first)
                _, beside = into_place(place, lambda new: os.link(
                    name, new, src_dir_fd=source.dir_fd, dst_dir_fd=place.dir_fd,
                    follow_symlinks=False))
        except UnsafePath as err:
            self.restore.refuse(path, err.why)
            return
        except OSError as err:
            why = err.strerror or err
            if err.errno == errno.ENOENT:
                why = f"its first link {first} was not restored"
            self.restore.file_failed(_named(path), f"hard link: {why}")
            return
        self.restore.summary["hardlinks"] += 1
        self.restore.summary["beside"] += beside

    def _restored_name(self, source, first) -> str:
        """The name the file restored as `first` has: its own, or the one
        beside what was there (never the file that was there)."""
        written = self.applier.written.get(first)
        for name in (source.name, source.name + BESIDE_SUFFIX):
            try:
                st = os.stat(name, dir_fd=source.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == written:
                return name
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), first)

    def _dir(self, path, meta) -> None:
        problems = []

        def apply(fd):
            self.applier.owner(fd, meta, problems)
            self.applier.xattrs(fd, meta, problems)
        try:
            self.restore.dest.with_dir(path, apply)
        except UnsafePath as err:
            self.restore.refuse(path, err.why)
            return
        except OSError:
            return   # not made: said when it failed
        self.applier.said(path, problems)


def _named(path):
    return Entry(path, "", 0, 0, 0, "")


class LookOnlyMeta(TreeMeta):
    """TreeMeta for `restore --dry-run`: links and special files are still
    told apart from contents to fetch, but nothing is made or set."""

    def after_batch(self) -> None:
        self._nodes, self._symlinks = [], []

    def finish(self) -> None:
        self._links, self._dirs = [], []
