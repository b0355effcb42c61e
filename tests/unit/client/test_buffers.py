"""A restore receives each segment's blocks into the buffers of blocks it has
already written (flud.client.buffers), and never reuses one still in use."""
import pytest

from flud.client import buffers as buffers_module
from flud.client.buffers import BlockBuffers
from tests.unit.client.test_extents import _large_record, _large_tree, _restores, world  # noqa: F401
from tests.unit.client.test_pipeline import run_backup


def test_take_gives_a_writable_buffer_and_only_written_blocks_come_back():
    pool = BlockBuffers(size=8, keep=2)
    first, second, third = pool.take(), pool.take(), pool.take()
    assert len(first) == 8 and not first.readonly
    first[:] = b"12345678"
    pool.give_back([first[:5], b"not a pool buffer", memoryview(bytearray(7))])
    assert pool.held == 8
    again = pool.take()
    assert again.obj is first.obj
    assert bytes(again) == b"12345678"  # not cleared: the next answer overwrites it
    pool.give_back([second, third, again])
    assert pool.held == 16  # keep bounds what is held


@pytest.fixture
def counted(monkeypatch):
    """Every buffer BlockBuffers hands out, by identity."""
    handed = []
    real_take = BlockBuffers.take

    def take(self):
        view = real_take(self)
        handed.append(view.obj)
        return view

    monkeypatch.setattr(buffers_module.BlockBuffers, "take", take)
    return handed


def test_a_restore_reuses_its_block_buffers_and_stays_byte_identical(world, tmp_path, counted,
                                                                     monkeypatch):
    from flud.client import restore

    clock, home, network = world
    monkeypatch.setattr(restore, "FILE_FOOTPRINT", 2 * home.config["segment_size"])
    src, _ = _large_tree(tmp_path, extents_count=2.5)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(home, summary)
    segments = sum(len(e["segs"]) for e in record["ext"])
    assert _restores(world, tmp_path, src, manifest)
    k = home.config["k"]
    # every block of a full segment (the last one is shorter) was received
    # into a buffer out of one window's worth (two segments)
    assert len(counted) >= (segments - 1) * k
    assert len({id(b) for b in counted}) <= 2 * k


def test_a_corrupt_block_received_into_a_reused_buffer_is_refetched(world, tmp_path, counted):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(home, summary)
    _, key_hex, node_hex = record["ext"][0]["shares"][0]  # a primary's stream
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))
    assert _restores(world, tmp_path, src, manifest)
    assert counted  # the blocks, the corrupt ones too, came in through the buffers
