"""What is already under DEST, checked against what the snapshot recorded,
before anything is fetched (`--overwrite if-changed` and `if-newer`).

Everything here runs on a pool thread (it reads and hashes files), but
large_in_place, which runs on the reactor and hands each segment to the
pool; every path is reached through restore/destdir.py, never through a
symlink.

A small file is checked whole: the keyed hash the backup addressed it by
(its convergent key: HMAC of the user's secret over the SHA-256 of its
plaintext) must come out the same. A large file is checked segment by
segment against each segment's key (HMAC over its BLAKE3): a segment that
matches is not fetched. So a file in place that differs in one segment
costs one segment's fetch, and one whose size is the same and mtime too but
whose bytes are not is still caught (the fast path of size and mtime
decides nothing here).

A file cut into content-defined chunks (a version-3 record with runs) is
checked whole: cut again with the same keyed chunker, its content id (the
hash of its chunk ids, kept in its record) must be the record's; then (or
for a record written before the id was kept) its whole segments one by
one, as any large file's; a range of a segment has no key and is fetched.

A segment stored before segment keys were made from BLAKE3 (an old
snapshot's) never matches and is fetched: slower, never wrong.
"""
import mmap
import os
from typing import NamedTuple, Optional

from twisted.internet import defer

from flud.chunker import AVERAGE, ChunkSizes
from flud.client.repository.chunk_ids import ShortRead, content_id_of_fd
from flud.client.restore.destdir import UnsafePath
from flud.client.restore.file_writer import set_meta
from flud.client.restore.overwrite import resume_temp
from flud.crypto import convergent_key, content_digest, segment_convergence

KEEP, LANDED, FETCH = "keep", "landed", "fetch"


class Look(NamedTuple):
    """What to do with one small or empty file: KEEP the one in place (its
    mode and times were set), LANDED: `temp` holds it whole (a killed run
    wrote it; rename it into place), or FETCH it."""
    action: str
    temp: Optional[str] = None


def _read_all(fd: int, size: int) -> Optional[bytes]:
    """The file's `size` bytes, or None if it does not hold exactly that many."""
    chunks, left, offset = [], size, 0
    while left:
        got = os.pread(fd, left, offset)
        if not got:
            return None
        chunks.append(got)
        left -= len(got)
        offset += len(got)
    if os.pread(fd, 1, offset):
        return None
    return b"".join(chunks)


def _same_content(fd: int, info, entry, content, secret: bytes) -> bool:
    """The regular file open on fd holds exactly the entry's content."""
    if info.st_size != entry.size:
        return False
    if content["t"] == "E":
        return True
    data = _read_all(fd, entry.size)
    return data is not None and convergent_key(secret, content_digest(data)).hex() == content["key"]


def look_small(place, entry, content: dict, secret: bytes, temp: Optional[str],
               newer_only: bool, dry: bool = False) -> Look:
    """For a small or empty file (content: its record as written). newer_only
    (if-newer): keep what is in place unless the snapshot's copy is newer;
    else (if-changed): keep it if it holds the content, or use `temp` if a
    killed run left the whole content there. dry (--dry-run): only look,
    set and remove nothing."""
    opened = place.open_file()
    if newer_only:
        if opened is None:
            return Look(FETCH)
        os.close(opened[0])
        return Look(KEEP if opened[1].st_mtime_ns >= entry.mtime_ns else FETCH)
    if opened is not None:
        fd, info = opened
        try:
            if _same_content(fd, info, entry, content, secret):
                if not dry and ((info.st_mode & 0o7777) != entry.mode
                                or info.st_mtime_ns != entry.mtime_ns):
                    set_meta(fd, entry)
                return Look(KEEP)
        finally:
            os.close(fd)
    if temp is not None:
        left = place.open_file(temp)
        if left is not None:
            fd, info = left
            try:
                if _same_content(fd, info, entry, content, secret):
                    if not dry:
                        set_meta(fd, entry)
                    return Look(LANDED, temp)
            finally:
                os.close(fd)
            if not dry:
                place.unlink(temp)   # a part of it, or another content: written anew
    return Look(FETCH)


def newer_in_place(place, entry) -> bool:
    """if-newer: the file in place is at least as new as the snapshot's."""
    opened = place.open_file()
    if opened is None:
        return False
    os.close(opened[0])
    return opened[1].st_mtime_ns >= entry.mtime_ns


def _segment_matches(fd: int, offset: int, length: int, key_hex: str, secret: bytes,
                     buffer) -> bool:
    view = memoryview(buffer)[:length]
    got = 0
    while got < length:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n <= 0:
            return False
        got += n
    return segment_convergence(secret, view)[1].hex() == key_hex


IN_FINAL, IN_TEMP = "final", "temp"


class SegmentCheck:
    """One large file's segments looked for where they may already be: the
    file in place (`final_fd`) and the fixed temp a killed run left
    (`temp_fd`), each an open descriptor or None. where() is called once
    per segment on a pool thread; copy_into() then brings the segments
    found in the final file into the temp (kernel side: copy_file_range,
    a reflink where the filesystem shares blocks), so the temp is whole
    once the segments found nowhere are fetched into it."""

    def __init__(self, secret: bytes, final_fd: Optional[int], temp_fd: Optional[int],
                 buffer):
        self.secret = secret
        self.final_fd = final_fd
        self.temp_fd = temp_fd
        self.buffer = buffer

    def where(self, offset: int, length: int, key_hex: str) -> Optional[str]:
        """IN_FINAL, IN_TEMP, or None: the segment is nowhere, fetch it."""
        for fd, where in ((self.final_fd, IN_FINAL), (self.temp_fd, IN_TEMP)):
            if fd is not None and _segment_matches(fd, offset, length, key_hex, self.secret,
                                                   self.buffer):
                return where
        return None


def copy_range(src_fd: int, dst_fd: int, offset: int, length: int, buffer) -> None:
    """Bytes offset..offset+length of src written at the same offset of dst
    (pool thread): copy_file_range, or through `buffer` where it is refused."""
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src_fd, dst_fd, length - done, offset + done, offset + done)
            if n <= 0:
                break
            done += n
    except OSError:
        pass   # EXDEV, EINVAL, ENOSYS...: by hand, from where it stopped
    view = memoryview(buffer)
    while done < length:
        want = min(length - done, len(view))
        got = os.preadv(src_fd, [view[:want]], offset + done)
        if got <= 0:
            raise OSError(5, "the file in place became shorter while it was copied")
        written = 0
        while written < got:
            written += os.pwritev(dst_fd, [view[written:got]], offset + done + written)
        done += got


def look_files(dest, files, contents: dict, secret: bytes, newer_only: bool) -> list:
    """look_small for each of `files` (small or empty: Entry) under the
    SafeDest `dest`, on a pool thread: a Look each, or the UnsafePath that
    refused it. A file that cannot be read in place is fetched (and
    replacing it says why, if that fails too)."""
    looks = []
    for entry in files:
        try:
            with dest.place(entry.rel) as place:
                temp = None if newer_only else resume_temp(place.name, entry.last)
                looks.append(look_small(place, entry, contents[entry.last], secret, temp,
                                        newer_only))
        except UnsafePath as err:   # its directory changed meanwhile
            looks.append(err)
        except OSError:
            looks.append(Look(FETCH))
    return looks


def chunk_averages(config) -> list:
    """The average chunk sizes a file of this home may have been cut with:
    its setting, then flud's default (a home that changed its setting)."""
    averages = []
    for average in (config.get("chunk_size"), AVERAGE):
        if average and average not in averages:
            averages.append(average)
    return averages


def chunked_match(place, name: Optional[str], entry, content_id: str, secret: bytes,
                  averages, dry: bool = False) -> bool:
    """(pool) The file `name` in place (None: the file itself) holds the
    chunked content `content_id`: cut again with the keyed chunker, its
    content id comes out the same (client/repository/chunk_ids.py). Its
    mode and times are set when it does (not when dry: --dry-run)."""
    opened = place.open_file(name) if name is not None else place.open_file()
    if opened is None:
        return False
    fd, info = opened
    try:
        if info.st_size != entry.size:
            return False
        for average in averages:
            try:
                if content_id_of_fd(fd, entry.size, secret, ChunkSizes(average)) == content_id:
                    if not dry:
                        set_meta(fd, entry)
                    return True
            except ShortRead:   # it shrank meanwhile
                return False
        return False
    finally:
        os.close(fd)


@defer.inlineCallbacks
def _chunked_whole(ctx, place, temp: str, entry, content):
    """if-changed, a file cut into chunks: its content id is the hash of
    its chunk ids, so the file in place (or a killed run's temp) is first
    checked whole: KEEP, or every piece skipped (the temp holds it all), or
    None (look segment by segment: large_in_place)."""
    if content.chunked_id is None:   # written before the id was kept
        return None
    averages = chunk_averages(ctx.home.config)
    if (yield ctx.pool.run(chunked_match, place, None, entry, content.chunked_id, ctx.secret,
                           averages)):
        return KEEP
    if (yield ctx.pool.run(chunked_match, place, temp, entry, content.chunked_id, ctx.secret,
                           averages)):
        pieces = sum(1 for _ in content.pieces())
        return frozenset(range(pieces)), entry.size
    return None


@defer.inlineCallbacks
def large_in_place(ctx, place, temp: str, out, entry, content, transfer):
    """if-changed, a large file (content: its LargeContent): KEEP if the
    file in place holds it whole (its mode and times set); else (the
    positions of the segments the temp now holds, found there or copied
    there from the file in place: not to be fetched, their bytes). `out`:
    the temp's PositionalWriter. Reads one segment at a time, on ctx's
    pool, into a buffer of one segment counted on `transfer`."""
    if getattr(content, "runs", None) is not None:
        whole = yield _chunked_whole(ctx, place, temp, entry, content)
        if whole is not None:
            return whole
    # (segment, its range in the file, checkable): a piece that is a whole
    # segment is checked against its key; a range of one (a chunked file's
    # run) has no key of its own and is fetched.
    pieces = [(record, length, start == 0 and length == record.length)
              for record, start, length in content.pieces()]
    size = max((r.length for r, _, whole in pieces if whole), default=0)
    yield transfer.reserve(size, "check")
    final = temp_read = None
    buffer = mmap.mmap(-1, max(size, 1))
    try:
        final = place.open_file()
        temp_read = place.open_file(temp)
        check = SegmentCheck(ctx.secret, final[0] if final else None,
                             temp_read[0] if temp_read else None, buffer)
        where, offset = [], 0
        for record, length, whole in pieces:
            where.append((yield ctx.pool.run(check.where, offset, length, record.key))
                         if whole else None)
            offset += length
        if (final is not None and final[1].st_size == entry.size
                and all(w == IN_FINAL for w in where)):
            yield ctx.pool.run(set_meta, final[0], entry)
            return KEEP
        offset, skip, reused = 0, set(), 0
        for position, ((record, length, _), found) in enumerate(zip(pieces, where)):
            if found == IN_FINAL:
                yield ctx.pool.run(copy_range, final[0], out.fd, offset, length, buffer)
            if found is not None:
                skip.add(position)
                reused += length
            offset += length
    finally:
        for opened in (final, temp_read):
            if opened is not None:
                os.close(opened[0])
        buffer.close()
        if not transfer.closed:
            transfer.unreserve(size, "check")
    return frozenset(skip), reused
