"""Reading by range (flud mount): which segments a range touches, and the
segment cache that stays within its bound."""
from types import SimpleNamespace

from flud.client.restore import file_ranges as fileread
from flud.client.restore.file_ranges import FileReader, _Pending, _Segments


def table(lengths):
    content = SimpleNamespace(pieces=lambda: iter(
        (SimpleNamespace(length=n, key=f"k{i}"), 0, n) for i, n in enumerate(lengths)))
    return _Segments(content)


def test_pieces_of_one_segment_are_ranges_of_it():
    # a file cut into chunks: two pieces from one segment, then one whole
    seg = SimpleNamespace(length=300, key="s")
    other = SimpleNamespace(length=80, key="t")
    t = _Segments(SimpleNamespace(pieces=lambda: iter([(seg, 0, 120), (seg, 200, 100),
                                                       (other, 0, 80)])))
    assert t.size == 300 and t.starts == [0, 120, 220]
    assert t.cuts == [(0, 120), (200, 100), (0, 80)]
    assert list(t.covering(100, 130)) == [0, 1]


def test_a_range_touches_only_its_segments():
    t = table([100, 100, 100, 50])
    assert t.size == 350 and t.starts == [0, 100, 200, 300]
    assert list(t.covering(0, 100)) == [0]
    assert list(t.covering(99, 101)) == [0, 1]
    assert list(t.covering(150, 160)) == [1]
    assert list(t.covering(250, 350)) == [2, 3]
    assert list(t.covering(0, 350)) == [0, 1, 2, 3]


def test_the_segment_cache_keeps_its_bound_and_never_drops_a_fetch_in_flight(monkeypatch):
    monkeypatch.setattr(fileread, "SEGMENT_CACHE_BYTES", 250)
    reader = FileReader.__new__(FileReader)
    reader._segments, reader._segment_bytes = {}, 0
    import collections
    reader._segments = collections.OrderedDict()
    coming = _Pending(100)
    reader._segments[("c", 0)] = coming
    reader._segments[("c", 1)] = b"x" * 100
    reader._segment_bytes = 200
    reader._make_room(100)
    assert list(reader._segments) == [("c", 0)] and reader._segment_bytes == 100
    got = []
    coming.wait().addCallback(got.append)
    coming.wait().addCallback(got.append)
    coming.fire(b"y")
    assert got == [b"y", b"y"]   # every reader waiting gets the bytes
