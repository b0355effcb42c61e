"""Directory records of version 3 (client/repository/tree_records.py,
entry_meta.py): each entry with its metadata (owner, xattrs, hard link, data ranges, device numbers);
version-2 records (no metadata) still read; what a hostile record could
put in the metadata is refused."""
import json

import pytest

from flud.client.repository.entry_meta import MAX_RANGES, MAX_XATTR_BYTES, EMPTY_META, Meta, Owner
from flud.client.repository.tree_records import (BadRecord, DirEntry, DirectoryRecord, SmallRef,
                              directory_records)

H = "ab" * 32
META = Meta(Owner(1000, 100, "me", "users"), (("system.posix_acl_access", b"\x02\0\0\0"),
                                              ("user.note", b"\xff\0bytes")),
            "home/a/one", ((4096, 4096), (1 << 30, 10)), None)


def entries():
    return [
        DirEntry("one", "f", 0o644, 1, (1 << 30) + 10, SmallRef(H, "", H, 0, 4106), META),
        DirEntry("holes", "f", 0o600, 2, 1 << 30, None, Meta(ranges=())),
        DirEntry("pipe", "p", 0o640, 3, 0, None, Meta(Owner(0, 0, "root", "root"))),
        DirEntry("null", "c", 0o666, 4, 0, None, Meta(device=(1, 3))),
        DirEntry("plain", "f", 0o644, 5, 3, SmallRef(H, "", H, 0, 3)),
    ]


def test_a_version_3_record_round_trips_every_kind_of_metadata():
    (record,) = directory_records(entries())
    data = record.encode()
    assert json.loads(data)["v"] == 3
    decoded = DirectoryRecord.decode(data)
    assert decoded == record
    one = next(e for e in decoded.entries if e.name == "one")
    assert one.meta.xattrs[1] == ("user.note", b"\xff\0bytes")
    assert one.meta.packed_size() == 4106
    assert next(e for e in decoded.entries if e.name == "plain").meta == EMPTY_META


def test_a_version_2_record_still_reads_with_no_metadata():
    data = json.dumps({"v": 2, "t": "dir", "e": [
        ["a", "f", 0o644, 1, 3, ["S", H, "", H, 0, 3]], ["l", "l", 0o777, 1, 0, "a"]]}).encode()
    record = DirectoryRecord.decode(data)
    assert [e.meta for e in record.entries] == [EMPTY_META, EMPTY_META]


def row(meta, kind="f", size=5, ref=("S", H, "", H, 0, 5)):
    return ["x", kind, 0o644, 1, size, list(ref) if ref else None, meta]


@pytest.mark.parametrize("bad", [
    row({"o": [1, 2, "a"]}),                                     # an owner of the wrong shape
    row({"o": [-1, 2, "a", "b"]}),                               # a negative uid
    row({"x": [["user.a", "not base64!"]]}),                     # a value that is not base64
    row({"x": [["user.b", ""], ["user.a", ""]]}),                # unsorted xattrs
    row({"x": [["", ""]]}),                                      # an empty name
    row({"x": [["user.a", "A" * (MAX_XATTR_BYTES * 2)]]}),       # over the bound
    row({"h": "../../etc/passwd"}),                              # a link leaving the tree
    row({"h": "/etc/passwd"}),
    row({"s": [[10, 5], [12, 3]]}),                              # overlapping ranges
    row({"s": [[0, 0]]}),                                        # an empty range
    row({"s": [[0, 3], [8, 2]]}, size=9),                        # ranges beyond the size
    row({"s": []}, size=100),                                    # all holes, yet content
    row({"s": [[i * 2, 1] for i in range(MAX_RANGES + 1)]}, size=10 ** 9),
    row({"zz": 1}),                                              # an unknown field
    row({}, kind="c", size=0, ref=None),                         # a device without numbers
    row({"d": [1, 3]}, kind="p", size=0, ref=None),              # a FIFO with them
    row({}, kind="p", size=3, ref=None),                         # a FIFO with content
    ["x", "f", 0o644, 1, 5, ["S", H, "", H, 0, 5]],              # a version-2 row in v3
])
def test_bad_metadata_is_refused(bad):
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(json.dumps({"v": 3, "t": "dir", "e": [bad]}).encode())


def test_special_kinds_are_refused_in_a_version_2_record():
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(json.dumps(
            {"v": 2, "t": "dir", "e": [["x", "p", 0o644, 1, 0, None]]}).encode())


def test_the_ranges_sparse_keeps_are_the_ranges_a_record_holds():
    """sparse.py merges a file's data ranges down to what entry_meta.py
    lets a record hold: one number, defined in both (the record format
    stands on nothing of the client's)."""
    from flud.client import sparse
    from flud.client.repository import entry_meta

    assert sparse.MAX_RANGES == entry_meta.MAX_RANGES
