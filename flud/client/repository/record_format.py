"""The versions of the repository's records and the one check of a
record's head (its JSON object, version and type) before anything reads
it: tree_records.py (snapshot, directory, large content) and holder_map.py
(map pages, map index, root record) both read their records through here.
"""
import json

from flud.errors import BadRecord, FludError

FORMAT_VERSION = 2
# Directory records are written at version 3 (each entry carries its
# metadata: owner, xattrs, hard links, holes, device numbers; client/repository/entry_meta.py);
# version 2 records (no metadata) keep reading. A large-content record of a
# file cut into chunks (its runs) is version 3 too; fixed-extent ones stay 2.
# Every other record is 2.
DIR_VERSION = 3
CHUNKED_LARGE_VERSION = 3
_VERSIONS = {"dir": (2, 3), "large": (2, 3)}


def _need(condition, what: str) -> None:
    """(records._need, here too: the record formats stand on nothing of the client's)"""
    if not condition:
        raise BadRecord(what)


class NewerFormat(FludError):
    """A record written by a newer flud than this one."""

    code = "NEWER_FORMAT"


def record_head(data: bytes, kind: str, newest: int = None) -> dict:
    """The JSON object of a record of `kind`, its version checked (one this
    flud reads: 2, or for a directory or a large content 2 or 3). newest:
    kept for callers that name it; the table above decides."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadRecord(f"a {kind} record that is not JSON") from None
    _need(type(value) is dict, f"a {kind} record that is not an object")
    version = value.get("v")
    _need(type(version) is int, f"a {kind} record without a version")
    known = _VERSIONS.get(kind, (FORMAT_VERSION,))
    if version > known[-1]:
        raise NewerFormat(f"a {kind} record of format version {version}: this flud reads "
                          f"up to version {known[-1]}; upgrade flud")
    _need(version in known and value.get("t") == kind,
          f"not a version-{known[-1]} {kind} record")
    return value
