"""Reading a byte range of a share or an archive member, and VERIFY digests.

A reader covers exactly [start, start+length) of its source and never sees
past it, so a member read from an archive cannot leak its neighbours.
"""

from __future__ import annotations

import os

import blake3

from flud.storage.fileio import drop_cached, read_exactly, read_soon
from flud.storage.limits import IO_CHUNK


class Reader:
    def __init__(self, start: int, length: int) -> None:
        self._position = start
        self._end = start + length
        self.closed = False

    @property
    def remaining(self) -> int:
        return self._end - self._position

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (all that remain if n < 0); b"" at the end of the range."""
        if self.closed:
            raise ValueError("read from a closed share reader")
        n = self.remaining if n < 0 else min(n, self.remaining)
        if n == 0:
            return b""
        data = self._read_at(self._position, n)
        self._position += len(data)
        return data

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _read_at(self, position: int, n: int) -> bytes:
        raise NotImplementedError


class FileReader(Reader):
    """Owns an open file descriptor: a concurrent delete or compaction swap cannot
    pull the bytes out from under it (the inode lives while the fd is open)."""

    def __init__(self, fd: int, start: int, length: int) -> None:
        super().__init__(start, length)
        self._fd = fd

    def _read_at(self, position: int, n: int) -> bytes:
        return read_exactly(self._fd, n, position)  # pread: no shared file position

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class StreamingFileReader(FileReader):
    """A FileReader for large ranges read front to back (a RETRIEVE stream):
    each read asks the kernel for the next piece in the background and gives
    back the pages just read (see fileio.drop_cached).

    ahead: bytes after the range to read in the background now. A restore
    reads an extent's stream one block per RETRIEVE, front to back, each on a
    file opened anew (the kernel's own read-ahead starts over every time):
    the block after this one is then in memory when its RETRIEVE comes,
    instead of a cold read on the node's reactor thread."""

    def __init__(self, fd: int, start: int, length: int, ahead: int = 0) -> None:
        super().__init__(fd, start, length)
        if ahead > 0:
            read_soon(fd, start + length, ahead)

    def _read_at(self, position: int, n: int) -> bytes:
        data = super()._read_at(position, n)
        following = position + n
        if following < self._end:
            read_soon(self._fd, following, min(IO_CHUNK, self._end - following))
        drop_cached(self._fd, position, n)
        return data


class BytesReader(Reader):
    """Over an in-memory buffer; the store replaces, never shrinks, buffers it hands out."""

    def __init__(self, source: bytes | bytearray, start: int, length: int) -> None:
        super().__init__(start, length)
        self._source = source

    def _read_at(self, position: int, n: int) -> bytes:
        return bytes(self._source[position : position + n])


def verify_digest(reader: Reader, nonce: bytes) -> bytes:
    """BLAKE3(nonce || the reader's range), streamed in IO_CHUNK pieces."""
    hasher = blake3.blake3(nonce)
    with reader:
        while piece := reader.read(IO_CHUNK):
            hasher.update(piece)
    return hasher.digest()
