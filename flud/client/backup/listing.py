"""A directory's listing as a backup compares it with the last one: the
fingerprint kept in the index per directory (equal: the directory record
is kept, not read again). The backup and its preview both compare by it."""
import json

import blake3

from flud.client.records import KIND_NAMES
from flud.client.repository.tree_records import DIR_VERSION


def listing_fingerprint(entries) -> str:
    """What a directory's listing says of its entries (names, kinds, modes,
    times, sizes, inodes, link targets; ctime moves with any change of owner,
    xattrs or links): equal fingerprints, no change. The directory record's
    version is in it, so a record of an older version is made again (with
    the metadata it lacked), never kept."""
    # Kinds spelled out as they were when fingerprints were first kept.
    rows = [DIR_VERSION] + [[e.path.rsplit("/", 1)[-1], KIND_NAMES[e.kind], e.mode, e.mtime_ns,
                             e.size, e.ctime_ns, e.inode, e.target] for e in entries]
    return blake3.blake3(json.dumps(rows, ensure_ascii=False,
                                    separators=(",", ":")).encode("utf-8", "surrogateescape")
                         ).hexdigest()
