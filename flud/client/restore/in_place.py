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

A segment stored before segment keys were made from BLAKE3 (an old
snapshot's) never matches and is fetched: slower, never wrong.
"""
import mmap
import os
from typing import NamedTuple, Optional

from twisted.internet import defer

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


@defer.inlineCallbacks
def large_in_place(ctx, place, temp: str, out, entry, content, transfer):
    """if-changed, a large file (content: its LargeContent): KEEP if the
    file in place holds it whole (its mode and times set); else (the
    positions of the segments the temp now holds, found there or copied
    there from the file in place: not to be fetched, their bytes). `out`:
    the temp's PositionalWriter. Reads one segment at a time, on ctx's
    pool, into a buffer of one segment counted on `transfer`."""
    if getattr(content, "runs", None) is not None:
        # A file cut into chunks is ranges of segments, not whole ones in
        # order: the segment-by-segment check does not apply; it is fetched.
        return frozenset(), 0
    records = list(content.segment_fetches())
    size = max((r.length for r in records), default=0)
    yield transfer.reserve(size, "check")
    final = temp_read = None
    buffer = mmap.mmap(-1, max(size, 1))
    try:
        final = place.open_file()
        temp_read = place.open_file(temp)
        check = SegmentCheck(ctx.secret, final[0] if final else None,
                             temp_read[0] if temp_read else None, buffer)
        where, offset = [], 0
        for record in records:
            where.append((yield ctx.pool.run(check.where, offset, record.length, record.key)))
            offset += record.length
        if (final is not None and final[1].st_size == entry.size
                and all(w == IN_FINAL for w in where)):
            yield ctx.pool.run(set_meta, final[0], entry)
            return KEEP
        offset, skip, reused = 0, set(), 0
        for position, (record, found) in enumerate(zip(records, where)):
            if found == IN_FINAL:
                yield ctx.pool.run(copy_range, final[0], out.fd, offset, record.length, buffer)
            if found is not None:
                skip.add(position)
                reused += record.length
            offset += record.length
    finally:
        for opened in (final, temp_read):
            if opened is not None:
                os.close(opened[0])
        buffer.close()
        if not transfer.closed:
            transfer.unreserve(size, "check")
    return frozenset(skip), reused
