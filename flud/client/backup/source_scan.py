"""Walking the trees to back up: entries, excludes, what is skipped and why."""
import fnmatch
import os
import stat
from dataclasses import dataclass, field

from flud.client.records import BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO, FILE, SYMLINK


@dataclass(slots=True)
class Entry:
    path: str          # absolute path on this machine
    kind: str          # records.FILE, DIRECTORY, SYMLINK, FIFO, CHAR_DEVICE, BLOCK_DEVICE
    mode: int
    mtime_ns: int
    size: int = 0
    ctime_ns: int = 0
    inode: int = 0
    target: str = ""   # symlink target
    uid: int = 0
    gid: int = 0
    nlink: int = 1
    dev: int = 0       # the filesystem's (a hard link is (dev, inode))
    rdev: int = 0      # a device's numbers
    # A file with holes, as a backup reads it (sparse.py): its data ranges,
    # and its whole length (size is then the ranges' bytes: what is read).
    ranges: tuple = None
    whole: int = 0


@dataclass
class ScanResult:
    entries: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # (path, reason)

    @property
    def files(self):
        return [e for e in self.entries if e.kind == FILE]


_SPECIAL = ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
# What is kept as metadata alone (made again with mknod on restore); a
# socket is not: it means nothing without the process that listens on it.
_NODES = ((stat.S_ISFIFO, FIFO), (stat.S_ISCHR, CHAR_DEVICE), (stat.S_ISBLK, BLOCK_DEVICE))


def excluded(path: str, name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


def special_kind(mode: int) -> str:
    """What a file that is neither a directory, a regular file nor a symlink is."""
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def scan(roots, excludes=()) -> ScanResult:
    result = ScanResult()

    def on_skip(path, why):
        result.skipped.append((path, why))

    for root in roots:
        root = os.path.abspath(root)
        try:
            st = os.lstat(root)
        except OSError as err:
            on_skip(root, f"cannot read: {err.strerror}")
            continue
        entry = entry_of(root, st, on_skip)
        if entry is not None:
            _visit(entry, excludes, result, on_skip)
    return result


def entry_of(path: str, st, on_skip) -> Entry:
    """The entry of what lstat found at path, or None (said to on_skip) for
    what is not backed up: a special file, a link that cannot be read."""
    mode = st.st_mode
    # ctime for every kind: a chmod, chown or xattr change moves it alone,
    # and the listing's fingerprint (backup_job.py) must see it.
    common = dict(ctime_ns=st.st_ctime_ns, inode=st.st_ino, uid=st.st_uid, gid=st.st_gid,
                  nlink=st.st_nlink, dev=st.st_dev)
    if stat.S_ISDIR(mode):
        return Entry(path, DIRECTORY, stat.S_IMODE(mode), st.st_mtime_ns, **common)
    if stat.S_ISREG(mode):
        return Entry(path, FILE, stat.S_IMODE(mode), st.st_mtime_ns, st.st_size, **common)
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError as err:
            on_skip(path, f"cannot read link: {err.strerror}")
            return None
        return Entry(path, SYMLINK, stat.S_IMODE(mode), st.st_mtime_ns, target=target,
                     **common)
    for test, kind in _NODES:
        if test(mode):
            return Entry(path, kind, stat.S_IMODE(mode), st.st_mtime_ns, rdev=st.st_rdev,
                         **common)
    on_skip(path, f"{special_kind(mode)}: not backed up")
    return None


def list_children(path: str, excludes, on_skip) -> list:
    """The entries of one directory, sorted by name ([] if it cannot be listed)."""
    try:
        with os.scandir(path) as listing:
            found = sorted(listing, key=lambda e: e.name)
    except OSError as err:
        on_skip(path, f"cannot list: {err.strerror}")
        return []
    children = []
    for child in found:
        if excluded(child.path, child.name, excludes):
            continue
        try:
            child_st = child.stat(follow_symlinks=False)
        except OSError as err:
            on_skip(child.path, f"vanished or unreadable: {err.strerror}")
            continue
        entry = entry_of(child.path, child_st, on_skip)
        if entry is not None:
            children.append(entry)
    return children


def _visit(entry: Entry, excludes, result: ScanResult, on_skip) -> None:
    result.entries.append(entry)
    if entry.kind == DIRECTORY:
        for child in list_children(entry.path, excludes, on_skip):
            _visit(child, excludes, result, on_skip)
