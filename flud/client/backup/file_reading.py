"""Reading a backup's files, and what is said when one cannot be read."""
import os

from flud.client.directio import SequentialReader
from flud.client.sparse import PackedReader, read_packed
from flud.errors import FludError


class FileChanged(FludError):
    """A file changed while it was backed up: it is skipped this run."""

    code = "FILE_CHANGED"


def read_small(entry):
    """The file's bytes in a buffer of their own (encrypted there later);
    of a file with holes, its data ranges end to end."""
    if getattr(entry, "ranges", None) is not None:
        data = read_packed(entry.path, entry.ranges)
        got = len(data)
    else:
        data = bytearray(entry.size + 1)  # one more: a file that grew reads more
        with open(entry.path, "rb", buffering=0) as f:
            got = f.readinto(data)
        del data[got:]
    st = os.stat(entry.path)
    if got != entry.size or changed(entry, st):
        raise FileChanged(f"{entry.path} changed while it was read")
    return data


def changed(entry, st) -> bool:
    """stat says the file is no longer as it was scanned (its time, or its
    whole length: a file with holes is read for less)."""
    holed = getattr(entry, "ranges", None) is not None
    return (st.st_mtime_ns != entry.mtime_ns
            or st.st_size != (entry.whole if holed else entry.size))


def file_reader(entry):
    """What reads a large file front to back: its data ranges alone if it
    has holes."""
    if getattr(entry, "ranges", None) is not None:
        return PackedReader(entry.path, entry.ranges)
    return SequentialReader(entry.path)


def read_into(entry, f, buffer, length) -> memoryview:
    """The next `length` bytes of the file, in `buffer`."""
    data = memoryview(buffer)[:length]
    if f.readinto(data) != length:
        raise FileChanged(f"{entry.path} changed while it was backed up")
    return data


def why_skipped(err) -> str:
    if isinstance(err, OSError):
        return f"cannot read: {err.strerror or err}"
    return str(err)
