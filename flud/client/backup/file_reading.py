"""Reading a backup's files, and what is said when one cannot be read."""
import os

from flud.errors import FludError


class FileChanged(FludError):
    """A file changed while it was backed up: it is skipped this run."""

    code = "FILE_CHANGED"


def read_small(entry):
    """The file's bytes in a buffer of their own (encrypted there later)."""
    data = bytearray(entry.size + 1)  # one more: a file that grew reads more
    with open(entry.path, "rb", buffering=0) as f:
        got = f.readinto(data)
    del data[got:]
    st = os.stat(entry.path)
    if got != entry.size or st.st_mtime_ns != entry.mtime_ns:
        raise FileChanged(f"{entry.path} changed while it was read")
    return data


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
