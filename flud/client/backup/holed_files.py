"""Which of a backup's large files have holes, and where their data is
(client/sparse.py): such a file is read and sent as its data ranges end to
end, by the large-file path, or by the small-file path when its data is
small (a 1 GiB image holding 4 KiB of data is one small file), or not at
all when it is all holes."""
import os

from flud.client.sparse import data_ranges, has_holes, packed_size


def split_holes(entries, small_limit: int, on_skip):
    """(large, holed): the entries still for the large-file path (those with
    holes and at least small_limit bytes of data among them, marked), and
    those with holes whose data is smaller (for the small-file path; size 0:
    all holes). Each marked entry has its ranges, its data's size as size
    and its whole length as whole."""
    large, holed = [], []
    for entry in entries:
        try:
            ranges = _ranges(entry)
        except OSError as err:
            on_skip(entry.path, f"cannot read: {err.strerror or err}")
            continue
        if ranges is not None:
            entry.ranges, entry.whole, entry.size = ranges, entry.size, packed_size(ranges)
            if entry.size < small_limit:
                holed.append(entry)
                continue
        large.append(entry)
    return large, holed


def _ranges(entry):
    """The data ranges of a file with holes as it was scanned; None for one
    without (or one that changed since: the read says so)."""
    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not has_holes(st) or (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns):
            return None
        ranges = data_ranges(fd, st.st_size)
        # Fewer blocks than bytes without a hole (a compressing file system):
        # read as it is, around the page cache.
        return None if packed_size(ranges) == st.st_size else ranges
    finally:
        os.close(fd)
