"""Walking the trees to back up: entries, excludes, what is skipped and why."""
import fnmatch
import os
import stat
from dataclasses import dataclass, field


@dataclass(slots=True)
class Entry:
    path: str          # absolute path on this machine
    kind: str          # "file", "dir", "symlink"
    mode: int
    mtime_ns: int
    size: int = 0
    ctime_ns: int = 0
    inode: int = 0
    target: str = ""   # symlink target


@dataclass
class ScanResult:
    entries: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # (path, reason)

    @property
    def files(self):
        return [e for e in self.entries if e.kind == "file"]


_SPECIAL = ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def excluded(path: str, name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


def special_kind(mode: int) -> str:
    """What a file that is neither a directory, a regular file nor a symlink is."""
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def scan(roots, excludes=()) -> ScanResult:
    result = ScanResult()
    for root in roots:
        root = os.path.abspath(root)
        try:
            st = os.lstat(root)
        except OSError as err:
            result.skipped.append((root, f"cannot read: {err.strerror}"))
            continue
        _visit(root, st, excludes, result)
    return result


def entry_of(path: str, st, on_skip) -> Entry:
    """The entry of what lstat found at path, or None (said to on_skip) for
    what is not backed up: a special file, a link that cannot be read."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return Entry(path, "dir", stat.S_IMODE(mode), st.st_mtime_ns)
    if stat.S_ISREG(mode):
        return Entry(path, "file", stat.S_IMODE(mode), st.st_mtime_ns, st.st_size,
                     st.st_ctime_ns, st.st_ino)
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError as err:
            on_skip(path, f"cannot read link: {err.strerror}")
            return None
        return Entry(path, "symlink", stat.S_IMODE(mode), st.st_mtime_ns, target=target)
    on_skip(path, f"{special_kind(mode)}: not backed up")
    return None


def _visit(path: str, st, excludes, result: ScanResult) -> None:
    entry = entry_of(path, st, lambda where, why: result.skipped.append((where, why)))
    if entry is None:
        return
    result.entries.append(entry)
    if entry.kind != "dir":
        return
    try:
        children = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as err:
        result.skipped.append((path, f"cannot list: {err.strerror}"))
        return
    for child in children:
        if excluded(child.path, child.name, excludes):
            continue
        try:
            child_st = child.stat(follow_symlinks=False)
        except OSError as err:
            result.skipped.append((child.path, f"vanished or unreadable: {err.strerror}"))
            continue
        _visit(child.path, child_st, excludes, result)
