"""A restore receives each segment's blocks into the buffers of blocks it has
already written (flud.client.buffers), and never reuses one still in use."""
import pytest

from flud.client.restore.block_buffers import BlockBuffers
from tests.unit.client.test_extents import _large_record, _large_tree, _restores, world  # noqa: F401
from tests.unit.client.test_pipeline import run_backup


def _now(d):
    assert d.called
    return d.result


def test_get_hands_out_count_buffers_then_waits_for_one_written_back():
    pool = BlockBuffers(size=4096, count=2)
    first, second = _now(pool.get()), _now(pool.get())
    assert len(first) == 4096 and not first.readonly and first.obj is not second.obj
    waiting = pool.get()
    assert not waiting.called  # both are out
    first[:5] = b"12345"
    pool.give_back([first[:5], b"not a pool buffer", memoryview(bytearray(7))])
    again = _now(waiting)
    assert again.obj is first.obj
    assert bytes(again[:5]) == b"12345"  # not cleared: the next answer overwrites it
    pool.give_back([again, again])  # twice: free once
    assert pool.held == 4096
    assert _now(pool.get()).obj is first.obj
    assert not pool.get().called


def test_an_abandoned_buffer_is_replaced_and_never_comes_back():
    pool = BlockBuffers(size=4096, count=1)
    lost = _now(pool.get())
    waiting = pool.get()
    pool.abandon(lost)  # its request failed: the connection may still write into it
    fresh = _now(waiting)
    assert fresh.obj is not lost.obj
    pool.give_back([lost])  # an abandoned buffer never comes back
    assert pool.held == 0
    pool.give_back([fresh])
    assert pool.held == 4096
    assert _now(pool.get()).obj is fresh.obj
    assert not pool.get().called  # one buffer in all: the count


def test_a_waiter_cancelled_while_it_waits_is_skipped():
    pool = BlockBuffers(size=4096, count=1)
    out = _now(pool.get())
    cancelled, waiting = pool.get(), pool.get()
    cancelled.addErrback(lambda _: None)
    cancelled.cancel()
    pool.give_back([out])
    assert _now(waiting).obj is out.obj


class CountedBuffers(BlockBuffers):
    """BlockBuffers that note every buffer they hand out, by identity."""

    handed = None

    def get(self):
        return super().get().addCallback(self._noted)

    def _noted(self, view):
        CountedBuffers.handed.append(view.obj)
        return view


@pytest.fixture
def counted():
    """Every buffer a restore's block buffers hand out (restore with
    block_buffers=CountedBuffers)."""
    CountedBuffers.handed = []
    yield CountedBuffers.handed
    CountedBuffers.handed = None


def test_a_restore_reuses_its_block_buffers_and_stays_byte_identical(world, tmp_path, counted,
                                                                     monkeypatch):
    from flud.client.restore import restore_job as restore
    clock, home, network = world
    monkeypatch.setattr(restore, "FILE_FOOTPRINT", 2 * home.config["segment_size"])
    src, _ = _large_tree(tmp_path, extents_count=2.5)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    segments = sum(len(e["segs"]) for e in record["ext"])
    assert _restores(world, tmp_path, src, manifest, block_buffers=CountedBuffers)
    k = home.config["k"]
    # every block of a full segment (the last one is shorter) was received
    # into a buffer out of one window's worth (two segments)
    assert len(counted) >= (segments - 1) * k
    assert len({id(b) for b in counted}) <= 2 * k


def test_a_corrupt_block_received_into_a_reused_buffer_is_refetched(world, tmp_path, counted):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    _, key_hex, node_hex = record["ext"][0]["shares"][0]  # a primary's stream
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))
    assert _restores(world, tmp_path, src, manifest, block_buffers=CountedBuffers)
    assert counted  # the blocks, the corrupt ones too, came in through the buffers


def _count_whole_fetches(monkeypatch) -> dict:
    """Segments fetched whole by a restore: in all, and the most at once."""
    from flud.client.restore import block_restore as blocks
    counts = {"running": 0, "most": 0, "calls": 0}
    real_fetch = blocks.fetch_segment_pieces

    def done(result):
        counts["running"] -= 1
        return result

    def fetch(*args, **kwargs):
        counts["running"] += 1
        counts["calls"] += 1
        counts["most"] = max(counts["most"], counts["running"])
        return real_fetch(*args, **kwargs).addBoth(done)

    monkeypatch.setattr(blocks, "fetch_segment_pieces", fetch)
    return counts


def test_segments_restored_whole_take_their_room_from_the_window(world, tmp_path, monkeypatch):
    """A segment that is not restored block by block (the file's last, one
    from before extents, or every one here) holds k of the window's block
    slots while it is fetched and written: never more than the window's
    segments at once, whatever the file's length."""
    from flud.client.restore import restore_job as restore
    clock, home, network = world
    monkeypatch.setattr(restore, "FILE_FOOTPRINT", 2 * home.config["segment_size"])
    src, _ = _large_tree(tmp_path, extents_count=1.5)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    fetches = _count_whole_fetches(monkeypatch)
    assert _restores(world, tmp_path, src, manifest, by_blocks=False)  # every segment whole
    assert 1 < fetches["most"] <= 2  # overlapping, within the window of two segments


def test_segments_with_a_bad_block_are_repaired_one_at_a_time(world, tmp_path, monkeypatch):
    """A corrupt stream spoils a block of every segment of its extent: each
    such segment is restored whole (more holders, a decode), one at a time,
    so a bad node costs the file one segment more, not one per segment."""
    import os
    import random

    from flud.client.repository import extents
    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "large.bin"), "wb") as f:  # whole segments only
        f.write(random.Random(3).randbytes(2 * extents.EXTENT_BYTES))
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    _, key_hex, node_hex = record["ext"][0]["shares"][1]  # a primary's stream
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))
    fetches = _count_whole_fetches(monkeypatch)
    assert _restores(world, tmp_path, src, manifest)
    assert fetches["calls"] == len(record["ext"][0]["segs"])  # every segment of that extent
    assert fetches["most"] == 1
