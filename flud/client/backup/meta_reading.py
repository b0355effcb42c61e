"""What a backup keeps of an entry beyond mode and time (client/repository/entry_meta.py):
read from the file system as each directory's record is made.

Owner and group by number and by name (names looked up once per number).
Every extended attribute the process can list: user.*, the ACLs
(system.posix_acl_access, system.posix_acl_default: the kernel's binary
form, which names users and groups by number), and trusted.* and
security.* where it may read them (root). An attribute that cannot be read,
or that would carry the entry's over MAX_XATTR_BYTES, is left out and said
(on_problem); a file system without xattrs has none to keep.
"""
import errno
import grp
import os
import pwd

from flud.client.records import BLOCK_DEVICE, CHAR_DEVICE
from flud.client.repository.entry_meta import MAX_XATTR_BYTES, Meta, Owner

_NAMES_KEPT = 1024   # numbers whose names are remembered (a home has a handful)
_NO_XATTRS = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


class MetaReader:
    """meta(entry, link=None, ranges=None) -> Meta of a scan.Entry.
    on_problem(path, why): something of it that could not be kept."""

    def __init__(self, on_problem=lambda path, why: None):
        self._on_problem = on_problem
        self._users, self._groups = {}, {}

    def meta(self, entry, link=None, ranges=None) -> Meta:
        device = None
        if entry.kind in (CHAR_DEVICE, BLOCK_DEVICE):
            device = (os.major(entry.rdev), os.minor(entry.rdev))
        owner = Owner(entry.uid, entry.gid, self._name(self._users, entry.uid, _user),
                      self._name(self._groups, entry.gid, _group))
        return Meta(owner, self.xattrs(entry.path), link, ranges, device)

    def xattrs(self, path: str) -> tuple:
        """((name, value), ...) sorted by name: what could be read of them."""
        try:
            names = os.listxattr(path, follow_symlinks=False)
        except OSError as err:
            if err.errno not in _NO_XATTRS and err.errno != errno.ENOENT:
                self._on_problem(path, f"its xattrs cannot be listed: {err.strerror}")
            return ()
        found, total = [], 0
        for name in sorted(names):
            try:
                value = os.getxattr(path, name, follow_symlinks=False)
            except OSError as err:
                if err.errno != errno.ENODATA:   # removed meanwhile: nothing to keep
                    self._on_problem(path, f"xattr {name} not kept: {err.strerror}")
                continue
            total += len(name) + len(value)
            if total > MAX_XATTR_BYTES:
                self._on_problem(path, f"xattr {name} not kept: the entry's xattrs are over "
                                       f"{MAX_XATTR_BYTES // 1024} KiB")
                total -= len(name) + len(value)
                continue
            found.append((name, value))
        return tuple(found)

    @staticmethod
    def _name(cache: dict, number: int, lookup) -> str:
        name = cache.get(number)
        if name is None:
            name = lookup(number)
            if len(cache) < _NAMES_KEPT:
                cache[number] = name
        return name


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""
