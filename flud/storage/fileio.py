"""Low-level file helpers: whole writes, fsync, ENOSPC translation, range copies.

All writes of stored bytes go through write_all() (os.write), so a test can
simulate a full disk by patching os.write.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from flud.storage.errors import NoSpace
from flud.storage.limits import IO_CHUNK

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def disk_full_as_no_space(what: str) -> Iterator[None]:
    """Turn the OS's 'disk full' / 'quota exceeded' into the store's NoSpace."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise NoSpace(f"the disk is full while {what}: {os.strerror(exc.errno)}") from exc
        raise


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (it may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# Buffers per writev: the kernel refuses more than IOV_MAX (1024 on Linux).
WRITEV_MAX = 1024


def write_all_pieces(fd: int, views: list[memoryview]) -> None:
    """write_all of several buffers, a writev per WRITEV_MAX of them."""
    if len(views) == 1:
        return write_all(fd, views[0])
    for start in range(0, len(views), WRITEV_MAX):
        group = views[start:start + WRITEV_MAX]
        written = os.writev(fd, group)
        for view in group:
            if written >= len(view):
                written -= len(view)
                continue
            write_all(fd, view[written:])  # a short writev: the rest one by one
            written = 0


def read_exactly(fd: int, length: int, offset: int) -> bytes:
    """pread that fails loudly if the file is shorter than the index says."""
    pieces = []
    while length:
        piece = os.pread(fd, length, offset)
        if not piece:
            raise OSError(errno.EIO, f"stored file ends early at byte {offset}; it was truncated behind the store")
        pieces.append(piece)
        length -= len(piece)
        offset += len(piece)
    return b"".join(pieces) if len(pieces) != 1 else pieces[0]


def copy_range(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> None:
    """Copy bytes between files in IO_CHUNK pieces (bounded memory)."""
    while length:
        piece = read_exactly(src_fd, min(length, IO_CHUNK), src_offset)
        os.lseek(dst_fd, dst_offset, os.SEEK_SET)
        write_all(dst_fd, piece)
        src_offset += len(piece)
        dst_offset += len(piece)
        length -= len(piece)


# sync_file_range(2) flag: start writing the range back, do not wait.
_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range = []  # [function or None], looked up once


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of fd to disk, without waiting.

    A large upload is then mostly on disk when its fsync comes, so the fsync,
    which the sender waits for, is short (a 64 MiB share: 33 ms of fsync
    measured here, serial with the transfer). Linux only; elsewhere a no-op.
    """
    if not _sync_file_range:
        try:
            import ctypes
            import ctypes.util
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            function = libc.sync_file_range
            function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
            _sync_file_range.append(function)
        except (OSError, AttributeError):
            _sync_file_range.append(None)
    function = _sync_file_range[0]
    if function is not None:
        function(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # advisory: errors ignored


# Shares at least this large are streamed past the page cache (drop_cached);
# smaller ones stay cached: they are the ones read again soon (check_load,
# archive-sized objects).
STREAMED_MIN = 128 * 1024


def drop_cached(fd: int, offset: int = 0, length: int = 0) -> None:
    """Give a file's clean cached pages back to the kernel (length 0: to the end).

    A node writes each share once and reads it back rarely, so caching shares
    only evicts what is worth caching. And the pages given back are the ones
    the next upload gets: measured in this machine's VM, filling pages that
    were never touched costs 2 ms of system time per MB (the largest single
    CPU cost of a backup on a 50-node testnet), filling recycled ones 0.2 ms.
    Advisory: a no-op where unsupported; dirty pages are left alone.
    """
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def read_soon(fd: int, offset: int, length: int) -> None:
    """Start reading a range into the page cache in the background (advisory)."""
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    except (AttributeError, OSError):
        pass


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in this directory durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durably(path: str, stop_at: str, durable: bool) -> None:
    """mkdir -p below stop_at; fsync the parent of every directory created."""
    missing = []
    while not os.path.isdir(path) and path != stop_at:
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue  # another thread made it first
        if durable:
            fsync_dir(os.path.dirname(directory))
