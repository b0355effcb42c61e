"""Where everything lives under a store's root directory.

    root/FORMAT                  "flud-store 1": refuse to open what we do not know
    root/index.sqlite            the index (+ -wal, -shm)
    root/incoming/               uploads in progress; emptied at every open
    root/shares/ab/<hex>         one file per standalone share, named by its key
    root/archives/<owner>.tar    one append-only tar per sender
    root/archives/<owner>.tar.compact   a compaction in progress

One level of 256-way fan-out, all 256 directories made when the store is
created: no parent ever holds more than 256 subdirectories (ext3 refused more
than 32000), and no STORE pays for a mkdir and the fsync of its parent (with
two on-demand levels nearly every share of a young node did: 2.3 ms per
commit against 1.35 ms measured here). Files per directory are not limited
by ext3/ext4 or xfs: 10 million shares leave ~39,000 files in each, which
hashed directory indexes look up in one step.
Only the hex of a key or owner id ever becomes part of a path.
"""

from __future__ import annotations

import os

from flud.storage.errors import FormatError
from flud.storage.fileio import fsync_dir
from flud.storage.limits import KEY_HEX_LENGTH

FORMAT_FILE = "FORMAT"
FORMAT_MAGIC = "flud-store"
FORMAT_VERSION = 1
INDEX_FILE = "index.sqlite"
INCOMING_DIR = "incoming"
SHARES_DIR = "shares"
ARCHIVES_DIR = "archives"
ARCHIVE_SUFFIX = ".tar"
COMPACT_SUFFIX = ".tar.compact"
FAN_OUT_CHARS = 2  # hex chars per level: 256 entries
FAN_OUT_LEVELS = 1


class Layout:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.fspath(root)
        self.format_file = os.path.join(self.root, FORMAT_FILE)
        self.index_file = os.path.join(self.root, INDEX_FILE)
        self.incoming = os.path.join(self.root, INCOMING_DIR)
        self.shares = os.path.join(self.root, SHARES_DIR)
        self.archives = os.path.join(self.root, ARCHIVES_DIR)

    def share_dir(self, key: bytes) -> str:
        name = key.hex()
        levels = [name[i * FAN_OUT_CHARS : (i + 1) * FAN_OUT_CHARS] for i in range(FAN_OUT_LEVELS)]
        return os.path.join(self.shares, *levels)

    def make_fan_out(self, durable: bool) -> None:
        """Create the 256 share directories once, so no STORE ever makes one."""
        made = False
        for i in range(16 ** (FAN_OUT_CHARS * FAN_OUT_LEVELS)):
            path = os.path.join(self.shares, f"{i:0{FAN_OUT_CHARS}x}")
            if not os.path.isdir(path):
                os.mkdir(path)
                made = True
        if made and durable:
            fsync_dir(self.shares)

    def share_path(self, key: bytes) -> str:
        return os.path.join(self.share_dir(key), key.hex())

    def archive_path(self, owner: bytes) -> str:
        return os.path.join(self.archives, owner.hex() + ARCHIVE_SUFFIX)

    def compact_path(self, owner: bytes) -> str:
        return os.path.join(self.archives, owner.hex() + COMPACT_SUFFIX)

    def owner_of_archive_file(self, filename: str) -> bytes | None:
        """The owner id an archives/ file name belongs to, or None if it is not ours."""
        for suffix in (COMPACT_SUFFIX, ARCHIVE_SUFFIX):
            if filename.endswith(suffix):
                stem = filename[: -len(suffix)]
                try:
                    return bytes.fromhex(stem) if len(stem) == KEY_HEX_LENGTH else None
                except ValueError:
                    return None
        return None


def check_or_claim_format(layout: Layout, durable: bool) -> None:
    """Write FORMAT into a new store; refuse a store of another format or version."""
    expected = f"{FORMAT_MAGIC} {FORMAT_VERSION}"
    try:
        with open(layout.format_file, encoding="utf-8") as f:
            found = f.read().strip()
    except FileNotFoundError:
        if os.path.exists(layout.index_file):
            raise FormatError(
                f"{layout.root} has an index but no {FORMAT_FILE} file; it was not made by this "
                "version of flud, or is damaged. Refusing to open it."
            ) from None
        _write_format(layout, expected, durable)
        return
    if found != expected:
        raise FormatError(
            f"{layout.root} holds a store of format {found!r}; this flud reads only {expected!r}. "
            "Upgrade flud, or point it at another directory."
        )


def _write_format(layout: Layout, text: str, durable: bool) -> None:
    temp = layout.format_file + ".tmp"
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(temp, layout.format_file)
    if durable:
        fsync_dir(layout.root)
