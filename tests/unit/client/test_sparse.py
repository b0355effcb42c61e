"""Files with holes (client/sparse.py): their data ranges found without
reading them, read end to end, and put back in place with the holes left
as holes."""
import os

import pytest

from flud.client import sparse
from flud.client.sparse import PackedReader, data_ranges, expand, has_holes, packed_size

MIB = 1024 * 1024


def holed(path, size, pieces):
    """A file of `size` bytes, holes except pieces [(offset, bytes)]."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in pieces:
            f.seek(offset)
            f.write(data)
    return str(path)


def ranges_of(path, size=None, **kw):
    fd = os.open(path, os.O_RDONLY)
    try:
        return data_ranges(fd, os.fstat(fd).st_size if size is None else size, **kw)
    finally:
        os.close(fd)


def test_the_data_ranges_of_a_holed_file_are_found_and_read_alone(tmp_path):
    a, b = os.urandom(4096), os.urandom(8192)
    path = holed(tmp_path / "img", 64 * MIB, [(4096, a), (32 * MIB, b)])
    assert has_holes(os.stat(path))
    ranges = ranges_of(path)
    assert ranges == ((4096, 4096), (32 * MIB, 8192))
    buffer = bytearray(packed_size(ranges) + 10)
    with PackedReader(path, ranges) as reader:
        assert reader.readinto(buffer) == len(a) + len(b)
        reader.seek(4000)            # a read across two ranges, from the middle of one
        piece = bytearray(200)
        assert reader.readinto(piece) == 200
    assert bytes(buffer[:12288]) == a + b
    assert bytes(piece) == (a + b)[4000:4200]


def test_near_ranges_merge_and_their_count_is_bounded(tmp_path):
    pieces = [(i * 128 * 1024, b"x" * 4096) for i in range(64)]
    path = holed(tmp_path / "frag", 16 * MIB, pieces)
    assert len(ranges_of(path)) == 64                   # gaps of 124 KiB: kept apart
    assert len(ranges_of(path, gap=200 * 1024)) == 1    # nearer than the gap: one range
    bounded = ranges_of(path, most=10)
    assert len(bounded) <= 10
    covered = [(o, o + n) for o, n in bounded]
    assert all(any(s <= off and off + 4096 <= e for s, e in covered) for off, _ in pieces)


def test_a_file_all_holes_has_no_ranges_and_a_dense_one_is_not_holed(tmp_path):
    path = holed(tmp_path / "empty", 8 * MIB, [])
    assert ranges_of(path) == ()
    dense = tmp_path / "dense"
    dense.write_bytes(os.urandom(2 * MIB))
    assert not has_holes(os.stat(dense))


@pytest.mark.parametrize("punch", [True, False])
def test_expand_puts_the_packed_content_back_with_its_holes(tmp_path, monkeypatch, punch):
    if not punch:   # a file system that cannot punch holes: zeros written instead
        monkeypatch.setattr(sparse, "_fallocate", None)
    pieces = [(0, os.urandom(5000)), (3 * MIB, os.urandom(3 * MIB + 7)), (9 * MIB, b"end")]
    source = holed(tmp_path / "src", 9 * MIB + 3, pieces)
    ranges = ranges_of(source)
    out = tmp_path / "out"
    with PackedReader(source, ranges) as reader, open(out, "wb") as f:
        data = bytearray(packed_size(ranges))
        reader.readinto(data)
        f.write(data)
    fd = os.open(out, os.O_RDWR)
    try:
        expand(fd, ranges, 9 * MIB + 3)
    finally:
        os.close(fd)
    assert out.read_bytes() == open(source, "rb").read()
    if punch:
        assert os.stat(out).st_blocks * 512 <= os.stat(source).st_blocks * 512 + 64 * 1024
