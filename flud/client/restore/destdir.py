"""Paths under a restore's DEST, walked without ever following a symlink.

Checking a path as text says nothing about where the kernel takes it: with
DEST/tree a symlink to /elsewhere (there before the restore, or restored
from an older snapshot whose `tree` was a link), every file of tree/ would
land in /elsewhere. So DEST is opened once, and every directory below it
is opened from its parent's descriptor, one name at a time, with
O_NOFOLLOW: a component that is a symlink, or not a directory, is refused
with UnsafePath and nothing is written through it. Files are created with
O_EXCL | O_NOFOLLOW beside their parent's descriptor, and renamed, linked
and timed relative to it, so the final name is never followed either.

DEST itself is the user's own choice and may be a symlink.

The descriptors of directories already walked are kept (DIR_CACHE of them,
least recently used let go first): a restore visits a directory's files
one after the other, so most paths cost a dictionary lookup, not a walk.
The cache is used from the reactor and from the restore's writer threads:
one lock around every walk, so a descriptor is never let go (or DEST
closed) while another thread duplicates or uses it.

What this does not stop: someone else who can write in DEST and moves a
directory away while the restore runs; its descriptor, once opened, goes
with it.
"""
import ctypes
import errno
import os
import stat
import threading
from collections import OrderedDict

from flud.errors import FludError

# Directory descriptors kept open at once (beside DEST's own). Each Place
# handed out holds one more of its own until it is closed.
DIR_CACHE = 32

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(FludError):
    """A path of a snapshot that would lead outside DEST, or through
    something that is not a plain directory of DEST; nothing was written."""

    code = "UNSAFE_PATH"

    def __init__(self, rel: str, why: str):
        super().__init__(f"{rel}: {why}")
        self.rel = rel
        self.why = why


def split(rel: str) -> list:
    """The names of a relative path, each one a plain name; UnsafePath if
    any is empty, `.` or `..`, or the path is absolute."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if not parts or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise UnsafePath(repr(rel) if isinstance(rel, str) else str(rel),
                         "not a plain relative path (empty, absolute, `.` or `..` in it): "
                         "never restored")
    return parts


RENAME_NOREPLACE = 1   # linux/fs.h


def _load_renameat2():
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):   # not glibc 2.28 or later: the link fallback
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint)
    return function


_renameat2 = _load_renameat2()


def rename_noreplace(dir_fd: int, src: str, dst: str) -> bool:
    """renameat2(RENAME_NOREPLACE) of src to dst in the directory dir_fd:
    True once done; False where the kernel or the filesystem lacks it
    (ENOSYS, EINVAL: the caller falls back); FileExistsError if dst is taken,
    another OSError as the call failed."""
    if _renameat2 is None:
        return False
    if _renameat2(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), dst)   # EEXIST: a FileExistsError


class Place:
    """A name in one directory of DEST: that directory's descriptor (its own
    copy, closed by close()) and the name; every call is relative to it."""

    def __init__(self, dir_fd: int, name: str, rel: str):
        self.dir_fd = dir_fd
        self.name = name
        self.rel = rel

    def exists(self, name: str = None) -> bool:
        """Anything there, a symlink included (not followed)."""
        try:
            os.stat(name or self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def open_new(self, name: str, mode: int) -> int:
        """A descriptor of a file created here, write only; FileExistsError if
        anything, a symlink included, has that name."""
        return os.open(name, NEW_FILE_FLAGS, mode, dir_fd=self.dir_fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)

    def rename_new(self, src: str, dst: str) -> None:
        """src renamed to dst in one step that never replaces: FileExistsError
        if anything (a symlink included) has the name dst, however late it
        appeared. renameat2(RENAME_NOREPLACE) where the filesystem has it;
        else a hard link (which fails on a taken name) and src unlinked."""
        if rename_noreplace(self.dir_fd, src, dst):
            return
        try:
            os.link(src, dst, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd,
                    follow_symlinks=False)
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.EOPNOTSUPP):
                raise
            # A filesystem with neither (FAT, some network mounts): look,
            # then rename; the one case where a name that appears in
            # between can still be replaced.
            if self.exists(dst):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from None
            self.rename(src, dst)
            return
        os.unlink(src, dir_fd=self.dir_fd)

    def open_file(self, name: str = None):
        """(descriptor, stat) of the regular file here, opened read only and
        never through a symlink; None if the name is missing, unreadable, or
        anything else (a symlink, a directory, a FIFO: opening one never
        blocks)."""
        try:
            fd = os.open(name or self.name, _READ_FLAGS, dir_fd=self.dir_fd)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EACCES,
                             errno.EPERM):   # unreadable: as if not there (replaced)
                return None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return fd, info

    def link_target(self, name: str = None):
        """What the symlink here points to; None if it is not a symlink."""
        try:
            return os.readlink(name or self.name, dir_fd=self.dir_fd)
        except (FileNotFoundError, OSError):
            return None

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass

    def symlink(self, target: str, name: str) -> None:
        os.symlink(target, name, dir_fd=self.dir_fd)

    def set_link_times(self, name: str, mtime_ns: int) -> None:
        os.utime(name, ns=(mtime_ns, mtime_ns), dir_fd=self.dir_fd, follow_symlinks=False)

    def close(self) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class SafeDest:
    """DEST, opened once; paths below it resolved name by name, never
    through a symlink. Safe to use from several threads (one lock)."""

    def __init__(self, path: str, read_only: bool = False):
        """read_only (a restore's --dry-run): nothing is ever made, DEST
        included; FileNotFoundError if DEST is missing."""
        self.path = os.path.abspath(path)
        self.read_only = read_only
        if not read_only:
            os.makedirs(self.path, exist_ok=True)
        self._root = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._dirs = OrderedDict()  # "a/b" -> descriptor, least recently used first
        self._lock = threading.Lock()  # held around every use of the cache

    def make_dir(self, rel: str) -> None:
        """DEST/rel as a directory: made (with its parents) where missing,
        kept where it is one; UnsafePath where anything on the way is not."""
        parts = split(rel)
        with self._lock:
            self._dir(parts, rel, create=True)

    def check(self, rel: str) -> None:
        """UnsafePath unless rel's parent is (or can be made) a plain
        directory of DEST; nothing kept open for the caller."""
        parts = split(rel)
        with self._lock:
            self._dir(parts[:-1], rel, create=True)

    def place(self, rel: str) -> Place:
        """Where rel's last name goes: its parent made where missing. The
        caller closes the Place."""
        parts = split(rel)
        with self._lock:
            fd = os.dup(self._dir(parts[:-1], rel, create=True))
        return Place(fd, parts[-1], rel)

    def existing_place(self, rel: str):
        """place(rel) where its parent is there already; None where it is not
        (nothing is made)."""
        parts = split(rel)
        with self._lock:
            try:
                fd = os.dup(self._dir(parts[:-1], rel, create=False))
            except FileNotFoundError:
                return None
        return Place(fd, parts[-1], rel)

    def open_dir(self, rel: str):
        """A descriptor of the directory DEST/rel (DEST itself for ""), the
        caller's to close; None if it is missing. Never made, never reached
        through a symlink (UnsafePath)."""
        parts = split(rel) if rel else []
        with self._lock:
            try:
                return os.dup(self._dir(parts, rel or ".", create=False))
            except FileNotFoundError:
                return None

    def set_dir_meta(self, rel: str, mode: int, mtime_ns: int) -> None:
        """A directory's mode and times, set through its own descriptor."""
        parts = split(rel)
        with self._lock:
            fd = self._dir(parts, rel, create=False)
            os.fchmod(fd, mode)
            os.utime(fd, ns=(mtime_ns, mtime_ns))

    def with_dir(self, rel: str, fn) -> None:
        """fn(descriptor) of the directory DEST/rel (which must exist), under
        the lock: its owner and xattrs are set through it."""
        parts = split(rel)
        with self._lock:
            fn(self._dir(parts, rel, create=False))

    def sync(self, sync_fs) -> None:
        """sync_fs(descriptor) on DEST's own descriptor (a whole-filesystem
        sync needs one descriptor on it)."""
        with self._lock:
            if self._root is not None:
                sync_fs(self._root)

    def close(self) -> None:
        with self._lock:
            while self._dirs:
                os.close(self._dirs.popitem()[1])
            if self._root is not None:
                os.close(self._root)
                self._root = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _dir(self, parts: list, rel: str, create: bool) -> int:
        """The descriptor of DEST/parts, owned by the cache: use it before
        the next call, under the lock."""
        if not parts:
            return self._root
        key = "/".join(parts)
        fd = self._dirs.get(key)
        if fd is not None:
            self._dirs.move_to_end(key)
            return fd
        create = create and not self.read_only
        parent = self._dir(parts[:-1], rel, create)
        fd = self._open_dir(parent, parts[-1], key, rel, create)
        self._dirs[key] = fd
        if len(self._dirs) > DIR_CACHE:
            os.close(self._dirs.popitem(last=False)[1])
        return fd

    @staticmethod
    def _open_dir(parent: int, name: str, key: str, rel: str, create: bool) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        except OSError as err:
            _refuse_if_not_a_dir(err, parent, name, key, rel)
            raise
        try:
            os.mkdir(name, 0o777, dir_fd=parent)  # the umask applies, as for any new directory
        except FileExistsError:
            pass  # made meanwhile: what it is, the open says
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            _refuse_if_not_a_dir(err, parent, name, key, rel)
            raise


def _refuse_if_not_a_dir(err: OSError, parent: int, name: str, key: str, rel: str) -> None:
    """UnsafePath for an open that met a symlink (ENOTDIR or ELOOP, as the
    kernel has it) or a file that is not a directory."""
    if err.errno not in (errno.ENOTDIR, errno.ELOOP):
        return
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode):
        why = f"{key} in DEST is a symlink; a restore never follows one"
    else:
        why = f"{key} in DEST is not a directory"
    raise UnsafePath(rel, why) from None
