"""Version-2 snapshot records (flud/client/repository/tree_records.py): one canonical encoding,
and decoding that refuses what a corrupt or hostile record could use."""
import json

import pytest

from flud.client.repository.tree_records import (MAX_DIR_ENTRIES, BadRecord, BlobRef, DirEntry, DirectoryRecord,
                              LargeRef, NewerFormat, SmallRef, SnapshotRecord,
                              directory_records)

H = "ab" * 32
REF = "12" * 32   # a record's blob id


def entries():
    return [
        DirEntry("src", "d", 0o40755, 1_700_000_000_000_000_000, 0, REF),
        DirEntry("empty", "f", 0o100644, 2, 0, None),
        DirEntry("notes.txt", "f", 0o100644, 3, 5, SmallRef(H, "", H, 0, 5)),
        DirEntry("film.mkv", "f", 0o100600, 4, 10 ** 9, LargeRef(REF)),
        DirEntry("link", "l", 0o120777, 5, 9, "notes.txt"),
        DirEntry("caf\udce9", "f", 0o100644, 6, 7, SmallRef("ef" * 32, "zstd", H, 100, 7)),
    ]


def test_a_directory_record_round_trips_with_every_kind_of_entry():
    (record,) = directory_records(entries())
    assert DirectoryRecord.decode(record.encode()) == record
    assert {e.name for e in record.entries} == {e.name for e in entries()}


def test_the_encoding_is_canonical_whatever_order_the_entries_came_in():
    one = directory_records(entries())[0].encode()
    two = directory_records(list(reversed(entries())))[0].encode()
    assert one == two
    names = [row[0] for row in json.loads(one)["e"]]
    assert names == sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape"))


def test_a_large_directory_is_split_into_bounded_records():
    many = [DirEntry(f"f{i:06d}", "f", 0o100644, 1, 0, None)
            for i in range(2 * MAX_DIR_ENTRIES + 1)]
    records = directory_records(many)
    assert [len(r.entries) for r in records] == [MAX_DIR_ENTRIES, MAX_DIR_ENTRIES, 1]
    first = records[0]._replace(more=(REF, REF))
    assert DirectoryRecord.decode(first.encode()).more == (REF, REF)


def test_an_empty_directory_is_one_empty_record():
    assert directory_records([]) == [DirectoryRecord(())]


def bad_dir(rows, **extra):
    return json.dumps({"v": 2, "t": "dir", "e": rows, **extra}).encode()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/etc", "a\0b", 7])
def test_a_name_that_is_not_one_path_component_is_refused(name):
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(bad_dir([[name, "f", 0o644, 1, 0, None]]))


@pytest.mark.parametrize("row", [
    ["x", "f", 0o644, 1, 5, None],                        # a size without content
    ["x", "f", 0o644, 1, 0, ["S", H, ""]],                # content without a size
    ["x", "f", 0o644, 1, 5, ["S", "zz", ""]],             # not a key
    ["x", "f", 0o644, 1, 5, ["S", H, 0, 5, ""]],          # a version-1 location inline
    ["x", "f", 0o644, 1, 5, ["S", H, "lzma"]],            # unknown compression
    ["x", "d", 0o755, 1, 0, None],                        # a directory without its record
    ["x", "d", 0o755, 1, 0, "../../etc"],                 # ... or with a path for one
    ["x", "f", 0o644, 1, 5, ["L", "nothex"]],             # a large file without its record
    ["x", "l", 0o777, 1, 0, ""],                          # a symlink without a target
    ["x", "p", 0o644, 1, 0, None],                        # unknown kind
    ["x", "f", -1, 1, 0, None],                           # bad mode
    ["x", "f", 0o644, 1, 0],                              # wrong shape
])
def test_a_malformed_entry_is_refused(row):
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(bad_dir([row]))


def test_repeated_or_unsorted_names_are_refused():
    row_a, row_b = ["a", "f", 0o644, 1, 0, None], ["b", "f", 0o644, 1, 0, None]
    for rows in ([row_a, row_a], [row_b, row_a]):
        with pytest.raises(BadRecord):
            DirectoryRecord.decode(bad_dir(rows))
    with pytest.raises(BadRecord):
        directory_records([DirEntry("a", "f", 0o644, 1, 0, None)] * 2)


def test_too_many_entries_in_one_record_are_refused():
    rows = [[f"f{i:06d}", "f", 0o644, 1, 0, None] for i in range(MAX_DIR_ENTRIES + 1)]
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(bad_dir(rows))


def test_a_newer_format_is_refused_with_a_message_that_says_to_upgrade():
    with pytest.raises(NewerFormat, match="upgrade flud") as caught:
        DirectoryRecord.decode(json.dumps({"v": 4, "t": "dir", "e": []}).encode())
    assert caught.value.code == "NEWER_FORMAT"


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"t":"dir","e":[]}',
                                  b'{"v":2,"t":"snapshot","e":[]}', b'{"v":1,"t":"dir","e":[]}'])
def test_what_is_not_a_directory_record_is_refused(data):
    with pytest.raises(BadRecord):
        DirectoryRecord.decode(data)


def snapshot(**changes):
    fields = dict(snapshot_id=3, time=1.7e9, host="laptop", paths=("/home/me/docs",),
                  tags=("daily",), protected=False, parent=REF, tree=REF,
                  stats={"files": 10, "bytes": 1000})
    fields.update(changes)
    return SnapshotRecord(**fields)


def test_a_snapshot_record_round_trips():
    for record in (snapshot(), snapshot(parent=None, tags=(), protected=True)):
        assert SnapshotRecord.decode(record.encode()) == record


@pytest.mark.parametrize("change", [
    {"paths": ["docs"]}, {"id": -1}, {"tree": None}, {"host": 5}, {"tags": [1]},
    {"parent": "../x"}, {"tree": "ab"},
])
def test_a_snapshot_record_with_a_bad_field_is_refused(change):
    value = json.loads(snapshot().encode())
    value.update(change)
    with pytest.raises(BadRecord):
        SnapshotRecord.decode(json.dumps(value).encode())
    del value["tree"]
    with pytest.raises(BadRecord):
        SnapshotRecord.decode(json.dumps(value).encode())


def test_a_blob_ref_locates_a_record_in_a_bundle():
    ref = BlobRef(H, "cd" * 32, 4096, 300)
    assert BlobRef.from_wire(ref.to_wire()) == ref
    for row in ([H, "cd" * 32, -1, 300], [H, "cd" * 32, 0, 0], [H, "x", 0, 1], [H]):
        with pytest.raises(BadRecord):
            BlobRef.from_wire(row)
