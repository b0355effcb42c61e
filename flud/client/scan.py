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


def _excluded(path: str, name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


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


def _visit(path: str, st, excludes, result: ScanResult) -> None:
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        result.entries.append(Entry(path, "dir", stat.S_IMODE(mode), st.st_mtime_ns))
        try:
            children = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as err:
            result.skipped.append((path, f"cannot list: {err.strerror}"))
            return
        for child in children:
            if _excluded(child.path, child.name, excludes):
                continue
            try:
                child_st = child.stat(follow_symlinks=False)
            except OSError as err:
                result.skipped.append((child.path, f"vanished or unreadable: {err.strerror}"))
                continue
            _visit(child.path, child_st, excludes, result)
    elif stat.S_ISREG(mode):
        result.entries.append(Entry(path, "file", stat.S_IMODE(mode), st.st_mtime_ns,
                                    st.st_size, st.st_ctime_ns, st.st_ino))
    elif stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError as err:
            result.skipped.append((path, f"cannot read link: {err.strerror}"))
            return
        result.entries.append(Entry(path, "symlink", stat.S_IMODE(mode), st.st_mtime_ns,
                                    target=target))
    else:
        what = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
        result.skipped.append((path, f"{what}: not backed up"))
