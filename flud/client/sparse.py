"""Files with holes: where their data is, reading only that, and writing it
back with the holes left as holes.

A sparse file (a VM image, a database preallocated) is stored as its data
ranges end to end (the "packed" content): the holes are neither read nor
sent, and the directory entry names the ranges (meta.Meta.ranges) with the
file's whole length. data_ranges() finds them with SEEK_DATA / SEEK_HOLE
(the kernel answers from the extent map, without reading); PackedReader
reads the packed content as if it were a file of its own, so the small- and
large-file paths of a backup read it as they read any file. On restore the
packed content lands first, then expand() moves each range to its offset,
last first (a range only ever moves up), and punches the rest back into
holes.

Ranges nearer than MERGE_GAP are merged (the zeros between them are stored
as data: zstd takes them out), and a file is only treated as sparse when
its holes add up to at least MIN_HOLES: one fragmented by a thousand small
holes costs a bounded list, never one range a block.
"""
import ctypes
import errno
import os

MAX_RANGES = 4096   # data ranges of one file recorded (nearer ones are merged; entry_meta.py checks it: the same number)

MIN_HOLES = 1024 * 1024   # a file with fewer bytes in holes is read as it is
MERGE_GAP = 64 * 1024     # data ranges nearer than this are one range
COPY_PIECE = 1024 * 1024  # what expand() holds at once

_SEEK_DATA = getattr(os, "SEEK_DATA", 3)
_SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)
_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01   # linux/falloc.h


def has_holes(st) -> bool:
    """lstat says fewer blocks are allocated than the length needs (by at
    least MIN_HOLES): worth asking where the data is."""
    return st.st_size - st.st_blocks * 512 >= MIN_HOLES


def data_ranges(fd: int, size: int, gap: int = MERGE_GAP, most: int = MAX_RANGES) -> tuple:
    """((offset, length), ...) of the data of the first `size` bytes of the
    open file fd, in order; nearer than `gap` merged, at most `most` (the gap
    doubles until they fit). Where the filesystem has no SEEK_DATA the whole
    file is one range."""
    ranges = []
    position = 0
    while position < size:
        try:
            start = os.lseek(fd, position, _SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:
                break          # only a hole from here on
            if err.errno == errno.EINVAL:
                return ((0, size),) if size else ()
            raise
        if start >= size:
            break
        end = min(os.lseek(fd, start, _SEEK_HOLE), size)
        if ranges and start - (ranges[-1][0] + ranges[-1][1]) < gap:
            ranges[-1][1] = end - ranges[-1][0]
        else:
            ranges.append([start, end - start])
        while len(ranges) > most:
            gap *= 2
            ranges = _merged(ranges, gap)
        position = end
    return tuple((offset, length) for offset, length in ranges)


def _merged(ranges, gap):
    out = []
    for offset, length in ranges:
        if out and offset - (out[-1][0] + out[-1][1]) < gap:
            out[-1][1] = offset + length - out[-1][0]
        else:
            out.append([offset, length])
    return out


def packed_size(ranges) -> int:
    return sum(length for _, length in ranges)


class PackedReader:
    """The data ranges of a file read end to end, as SequentialReader reads
    a file: readinto(buffer) fills it from the current packed position,
    seek(packed offset). Plain reads (the ranges are rarely aligned)."""

    def __init__(self, path: str, ranges) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._ranges = tuple(ranges)
        self._offset = 0

    def seek(self, offset: int) -> None:
        self._offset = offset

    def readinto(self, buffer) -> int:
        with memoryview(buffer) as view, view.cast("B") as target:
            filled = 0
            base = 0   # packed offset where the range starts
            for start, length in self._ranges:
                if filled == len(target):
                    break
                at = self._offset + filled
                if at >= base + length:
                    base += length
                    continue
                want = min(len(target) - filled, base + length - at)
                got = os.preadv(self._fd, [target[filled:filled + want]], start + at - base)
                filled += got
                if got < want:
                    break      # the file is shorter than it was: the caller sees it
                base += length
        self._offset += filled
        return filled

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_packed(path: str, ranges) -> bytearray:
    """A small packed content whole (the small-file path's read)."""
    data = bytearray(packed_size(ranges))
    with PackedReader(path, ranges) as reader:
        got = reader.readinto(data)
    del data[got:]
    return data


def _load_fallocate():
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    return function


_fallocate = _load_fallocate()


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Bytes offset..offset+length of fd read as zeros and take no space
    where the filesystem can punch holes; written as zeros where not."""
    if length <= 0:
        return
    if _fallocate is not None and _fallocate(fd, _PUNCH_HOLE | _KEEP_SIZE, offset, length) == 0:
        return
    zeros = bytes(min(length, COPY_PIECE))
    while length > 0:
        written = os.pwrite(fd, zeros[:min(length, len(zeros))], offset)
        offset += written
        length -= written


def expand(fd: int, ranges, size: int) -> None:
    """The file open as fd holds the packed content of `ranges` from offset
    0: each range goes to its place (last first, its end first: a range only
    moves up, so nothing not yet moved is overwritten), what it leaves
    becomes a hole, and the file is `size` long. COPY_PIECE held at once;
    the data is written twice (a restore writing each range at its place
    at once would save that: not done)."""
    packed = packed_size(ranges)
    position = packed
    for offset, length in reversed(ranges):
        position -= length
        if offset == position:
            continue
        done = length
        while done > 0:
            piece = min(COPY_PIECE, done)
            data = os.pread(fd, piece, position + done - piece)
            if len(data) != piece:
                raise OSError(errno.EIO, "the packed content is shorter than its ranges")
            os.pwrite(fd, data, offset + done - piece)
            done -= piece
        # What it leaves behind (below its new place) is a hole at once, so
        # the file never takes much more room than its data: no range not
        # yet moved lies there (theirs are all below `position`).
        punch_hole(fd, position, min(length, offset - position))
    # What still holds packed bytes and is no range's is a hole again.
    end = 0
    for offset, length in ranges:
        if offset > end:
            punch_hole(fd, end, min(offset, packed) - end)
        end = offset + length
        if end >= packed:
            break
    os.ftruncate(fd, size)
