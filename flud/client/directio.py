"""Reading and writing whole files around the page cache (O_DIRECT).

A backup reads each large file once and a restore writes each one once:
caching them only evicts what the user is working with, and filling cache
pages costs CPU (in this machine's VM, 2 ms of system time per MB for pages
never touched before). O_DIRECT moves the bytes between the device and aligned
buffers instead (2 GB/s, 0.02 ms of CPU per MB); a file the user has cached
stays cached.

O_DIRECT wants block-aligned offsets, lengths and memory. A backup reads a
segment straight into its page-aligned buffer (an anonymous mmap), and
anything unaligned (a file's last segment) through a reused aligned staging
buffer. A restore writes whole aligned blocks straight from their buffers
at their offsets (PositionalWriter), and anything else (a file's tail)
through the page cache. Filesystems without O_DIRECT (tmpfs) refuse the
open: plain I/O then.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import threading

ALIGN = 4096  # the largest logical block size in use; every offset and length is a multiple
STAGING_SIZE = 1024 * 1024  # one device read per MiB of an unaligned range
KEEP_SPARE = 4  # staging buffers kept for reuse (reused pages are already mapped)

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REUSE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def round_down(n: int) -> int:
    return n // ALIGN * ALIGN


class _StagingPool:
    """A few aligned buffers, reused so that their pages stay mapped."""

    def __init__(self) -> None:
        self._spare: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._spare:
                return self._spare.pop()
        return mmap.mmap(-1, STAGING_SIZE)

    def give(self, buffer: mmap.mmap) -> None:
        with self._lock:
            if len(self._spare) < KEEP_SPARE:
                self._spare.append(buffer)
                return
        buffer.close()


STAGING = _StagingPool()


def open_direct(path: str, flags: int, dir_fd: int | None = None) -> int | None:
    """An O_DIRECT descriptor for path (relative to dir_fd if given), or None
    where the filesystem has no O_DIRECT."""
    if not _O_DIRECT:
        return None
    try:
        return os.open(path, flags | _O_DIRECT, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise


def _direct_pieces(fd: int, length: int, offset: int):
    """Views of a staging buffer covering [offset, offset+length), in order,
    each valid until the next one is asked for; short at the end of the file.

    Reads the aligned blocks around the range: one device read per MiB, no
    page-cache pages.
    """
    buffer = STAGING.take()
    view = memoryview(buffer)
    try:
        while length:
            start = round_down(offset)
            want = min(round_up(offset + length) - start, STAGING_SIZE)
            got = os.preadv(fd, [view[:want]], start)
            usable = min(got - (offset - start), length)
            if usable <= 0:
                return
            yield view[offset - start : offset - start + usable]
            offset += usable
            length -= usable
            if got < want:
                return  # end of file
    finally:
        view.release()
        STAGING.give(buffer)


def readinto_direct(fd: int, target: memoryview, offset: int) -> int:
    """Fill target from offset through an O_DIRECT descriptor; bytes read.

    An aligned target (a page-aligned buffer, a whole number of blocks, read
    from an aligned offset) is read into directly; any other through staging."""
    if _aligned(target, offset):
        return _read_aligned(fd, target, offset)
    filled = 0
    for piece in _direct_pieces(fd, len(target), offset):
        target[filled : filled + len(piece)] = piece
        filled += len(piece)
    return filled


def _aligned(target: memoryview, offset: int) -> bool:
    if offset % ALIGN or len(target) % ALIGN or not len(target) or target.readonly:
        return False
    return ctypes.addressof(ctypes.c_char.from_buffer(target)) % ALIGN == 0


def _read_aligned(fd: int, target: memoryview, offset: int) -> int:
    filled = 0
    while filled < len(target):
        got = os.preadv(fd, [target[filled:]], offset + filled)
        if got <= 0:
            break  # end of file
        filled += got
        if got % ALIGN:
            break  # a short read ends at the end of the file
    return filled


class _ClosedOnExit:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SequentialReader(_ClosedOnExit):
    """A file read front to back in large pieces, around the page cache where
    the filesystem allows it (a backup reads each file once: caching it only
    evicts what the user is working with)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = open_direct(path, os.O_RDONLY)
        self._file = open(path, "rb", buffering=0) if self._fd is None else None
        self._offset = 0

    def readinto(self, buffer) -> int:
        if self._file is None:
            try:
                with memoryview(buffer) as view, view.cast("B") as target:
                    got = readinto_direct(self._fd, target, self._offset)
                self._offset += got
                return got
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # Opened, but refused at the read (some filesystems do): plain reads on.
                self._file = open(self._path, "rb", buffering=0)
                self._file.seek(self._offset)
                os.close(self._fd)
                self._fd = None
        return self._file.readinto(buffer)

    def seek(self, offset: int) -> None:
        """Read on from offset (an extent sent again starts over)."""
        self._offset = offset
        if self._file is not None:
            self._file.seek(offset)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        elif self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PositionalWriter(_ClosedOnExit):
    """A new file written piece by piece at the pieces' own offsets, in any
    order: page-aligned whole blocks at aligned offsets go to the device
    (O_DIRECT), anything else through the page cache. finish(length) sets
    the file's length and makes every byte durable.

    With dir_fd, path is a name in that directory, and the file must be new:
    created O_EXCL | O_NOFOLLOW, so nothing already there (a symlink
    included) is followed or written (FileExistsError). A restore opens its
    files so (client/restore/destdir.py)."""

    def __init__(self, path: str, mode: int = 0o600, dir_fd: int | None = None,
                 reuse: bool = False) -> None:
        """reuse (with dir_fd): a file already there under that name is
        written into as it is (a resumed restore's temp), never through a
        symlink, and only if it is a regular file."""
        if dir_fd is None:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        elif reuse:
            self.fd = os.open(path, _REUSE_FLAGS, mode, dir_fd=dir_fd)
        else:
            self.fd = os.open(path, _NEW_FLAGS, mode, dir_fd=dir_fd)
        self._direct = None
        try:
            if reuse and not stat.S_ISREG(os.fstat(self.fd).st_mode):
                raise FileExistsError(errno.EEXIST, "not a regular file", path)
            if dir_fd is None:
                self._direct = open_direct(path, os.O_WRONLY | os.O_CLOEXEC)
            else:
                self._direct = open_direct(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW,
                                           dir_fd)
            if self._direct is not None and not _same_file(self.fd, self._direct):
                # The name was replaced between the two opens: write nothing.
                raise FileExistsError(errno.EEXIST, "the file was replaced while opened", path)
        except BaseException:
            self.close()
            raise

    def write_at(self, offset: int, data) -> None:
        view = memoryview(data).cast("B")
        fd = self._direct if self._direct is not None and _aligned(view, offset) else self.fd
        done = 0
        while done < len(view):
            wrote = os.pwritev(fd, [view[done:]], offset + done)
            if wrote <= 0:
                raise OSError(errno.EIO, f"a write of {len(view) - done} bytes wrote nothing")
            done += wrote
            if done % ALIGN:
                fd = self.fd  # a short direct write left an unaligned rest: cached

    def finish(self, length: int) -> None:
        os.ftruncate(self.fd, length)
        os.fsync(self.fd)

    def close(self) -> None:
        for name in ("_direct", "fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


def _same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
