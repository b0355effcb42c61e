"""A large file's content-defined chunks and the names they go by.

Shared by backup (client/backup/chunked.py: which chunks are new) and
restore (client/restore/in_place.py: does the file in place already hold
the content a snapshot recorded). Both must cut and name a file exactly
alike, so the cutting and naming live here, in the repository room.

- A chunk is named by a keyed BLAKE3 of its plaintext (the key derived
  from the user secret, as every other name of content here).
- A chunked file's content id is "L" + SHA-256 of CONTENT_LABEL and its
  chunk ids in order: the same bytes cut with the same sizes and secret
  give the same id, so a file in place is checked by cutting it again.
"""
import hashlib
import mmap
import os

import blake3

from flud.chunker import Chunker, ChunkSizes
from flud.client.directio import SequentialReader
from flud.crypto import derive_key
from flud.errors import FludError

PURPOSE_CHUNK_ID = "chunk-id-v1"
CONTENT_LABEL = b"flud-chunked-v1"
READ_PIECE = 1024 * 1024    # a chunk pass reads this much at a time


class ShortRead(FludError):
    """A file held fewer bytes than its size said while it was cut."""

    code = "FILE_CHANGED"


def chunk_id_key(secret: bytes) -> bytes:
    return derive_key(secret, PURPOSE_CHUNK_ID)


def chunked_content_id(chunk_ids) -> str:
    """The content id of a file cut into chunks with these ids, in order."""
    return "L" + hashlib.sha256(CONTENT_LABEL + b"".join(chunk_ids)).hexdigest()


class ChunkFeeder:
    """A stream's chunks, [(offset, length, chunk id)], from its bytes fed
    in order (feed(offset, data); bytes fed again, as an extent sent again
    reads them, are skipped). Used from one thread at a time."""

    def __init__(self, secret: bytes, sizes: ChunkSizes, id_key: bytes):
        self._chunker = Chunker(secret, sizes)
        self._id_key = id_key
        self._hasher = blake3.blake3(key=id_key)
        self._start = self._fed = 0
        self.chunks = []

    def feed(self, offset: int, data) -> None:
        data = memoryview(data).cast("B")
        if offset + len(data) <= self._fed:
            return
        if offset > self._fed:
            raise ValueError(f"chunker fed at {offset} with {self._fed} bytes seen")
        data = data[self._fed - offset:]
        at = 0
        for cut in self._chunker.cuts(data):
            self._hasher.update(data[at:cut])
            end = self._fed + cut
            self.chunks.append((self._start, end - self._start, self._hasher.digest()))
            self._start, at = end, cut
            self._hasher = blake3.blake3(key=self._id_key)
        self._hasher.update(data[at:])
        self._fed += len(data)

    def finish(self) -> list:
        if self._start < self._fed:
            self.chunks.append((self._start, self._fed - self._start, self._hasher.digest()))
            self._start = self._fed
        return self.chunks


def _cut(readinto, size: int, secret: bytes, sizes: ChunkSizes, id_key: bytes,
         limit=None) -> list:
    feeder = ChunkFeeder(secret, sizes, id_key)
    piece = mmap.mmap(-1, READ_PIECE)
    view = memoryview(piece)
    done = 0
    end = size if limit is None else min(limit, size)
    try:
        while done < end:
            want = min(READ_PIECE, end - done)
            if readinto(view[:want], done) != want:
                raise ShortRead(f"a file of {size} bytes ended at {done}: it changed")
            feeder.feed(done, view[:want])
            done += want
    finally:
        view.release()
        piece.close()
    return feeder.finish() if end == size else feeder.chunks


def chunk_file(path: str, size: int, secret: bytes, sizes: ChunkSizes, id_key: bytes,
               limit=None) -> list:
    """(pool) [(offset, length, chunk id)] of the file at `path`, read front
    to back a READ_PIECE at a time into one buffer (a chunk is never held
    whole), around the page cache. limit: only the whole chunks of its
    first `limit` bytes (a probe)."""
    with SequentialReader(path) as f:
        def readinto(view, _offset):
            got = 0
            while got < len(view):
                n = f.readinto(view[got:])
                if n <= 0:
                    break
                got += n
            return got
        return _cut(readinto, size, secret, sizes, id_key, limit)


def chunk_fd(fd: int, size: int, secret: bytes, sizes: ChunkSizes, id_key: bytes) -> list:
    """(pool) The chunks of the file open on `fd` (its first `size` bytes;
    one that holds more is not asked: the caller compares sizes first)."""
    def readinto(view, offset):
        got = 0
        while got < len(view):
            n = os.preadv(fd, [view[got:]], offset + got)
            if n <= 0:
                break
            got += n
        return got
    return _cut(readinto, size, secret, sizes, id_key)


def content_id_of_fd(fd: int, size: int, secret: bytes, sizes: ChunkSizes) -> str:
    """(pool) The content id the file open on `fd` would be backed up under,
    cut with `sizes`."""
    chunks = chunk_fd(fd, size, secret, sizes, chunk_id_key(secret))
    return chunked_content_id(cid for _, _, cid in chunks)
