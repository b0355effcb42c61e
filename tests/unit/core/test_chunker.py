"""The content-defined chunker (flud/chunker.py, flud/_cdc.c)."""
import random

import pytest

from flud import chunker
from flud.chunker import Chunker, ChunkSizes

AVG = 16 * 1024
SECRET = b"s" * 32


def cut_points(data, piece, secret=SECRET, average=AVG):
    c = Chunker(secret, ChunkSizes(average))
    view = memoryview(data)
    out = []
    for offset in range(0, len(data), piece):
        out += [offset + cut for cut in c.cuts(view[offset:offset + piece])]
    return out


needs_c = pytest.mark.skipif(not chunker.available(), reason="flud/_cdc.c was not built")


@needs_c
def test_cuts_do_not_depend_on_how_the_stream_is_fed():
    data = random.Random(1).randbytes(2 * 1024 * 1024)
    whole = cut_points(data, len(data))
    assert whole == cut_points(data, 4096) == cut_points(data, 100_003)


@needs_c
def test_sizes_stay_within_bounds_and_average_near_the_setting():
    data = random.Random(2).randbytes(4 * 1024 * 1024)
    cuts = cut_points(data, 65536)
    sizes = [b - a for a, b in zip([0] + cuts, cuts)]
    assert all(AVG // 2 <= s <= 8 * AVG for s in sizes)
    assert 0.8 * AVG <= sum(sizes) / len(sizes) <= 1.25 * AVG


@needs_c
def test_an_insert_moves_only_the_cuts_near_it_and_the_secret_moves_all():
    rng = random.Random(3)
    data = rng.randbytes(2 * 1024 * 1024)
    at = 700_001
    changed = data[:at] + rng.randbytes(5000) + data[at:]
    before, after = cut_points(data, 65536), cut_points(changed, 65536)
    shifted = {c - 5000 for c in after if c > at}
    assert [c for c in before if c < at - 8 * AVG] == [c for c in after if c < at - 8 * AVG]
    assert {c for c in before if c > at + 16 * AVG} <= shifted
    other = cut_points(data, 65536, secret=b"t" * 32)
    assert len(set(other) & set(before)) < len(before) // 4


def test_without_the_c_scan_chunks_are_cut_at_fixed_sizes(monkeypatch):
    monkeypatch.setattr(chunker, "_cdc", None)
    assert cut_points(bytes(5 * AVG + 7), 3000) == [AVG * i for i in range(1, 6)]


def test_an_average_that_is_not_a_power_of_two_is_refused():
    with pytest.raises(ValueError):
        ChunkSizes(1000)
