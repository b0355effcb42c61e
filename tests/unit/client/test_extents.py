"""Large files in extents: one streamed STORE per node per extent, resent
elsewhere when a node fails or stalls, never resent once committed."""
import os
import random

import pytest
from twisted.internet import defer

from flud.client.repository import extents
from flud.client.repository.extents import STALL_TIMEOUT
from flud.client.repository.segments import StoreFailed
from flud.client.verify.share_set import ShareSet
from flud.client.verify.verify_job import verify
from tests.unit.client.fakes import FakeStreamedStore, make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees

SEGMENT = 64 * 1024


@pytest.fixture
def world(tmp_path, monkeypatch):
    clock, home, network = make_world(tmp_path, nodes=12)
    # small segments and extents: the same code, less to code
    home.config["segment_size"] = SEGMENT
    monkeypatch.setattr(extents, "EXTENT_BYTES", 16 * SEGMENT)
    return clock, home, network


def _large_tree(tmp_path, extents_count=2.5, seed=1):
    src = str(tmp_path / "src")
    os.makedirs(src)
    size = int(extents_count * extents.EXTENT_BYTES) + 123
    with open(os.path.join(src, "large.bin"), "wb") as f:
        f.write(random.Random(seed).randbytes(size))
    return src, size


def _large_record(world, summary):
    manifest = snapshot_manifest(world, summary["snapshot"])
    return manifest, next(r for r in manifest["contents"].values() if r["t"] == "L")


def _restores(world, tmp_path, src, manifest, **options):
    restored, job = run_restore(world, str(tmp_path / "out"), manifest, **options)
    assert restored["failed"] == 0
    return compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_one_store_per_node_per_extent_and_restore_by_range(world, tmp_path):
    clock, home, network = world
    n, k = home.config["n"], home.config["k"]
    src, size = _large_tree(tmp_path)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    assert len(record["ext"]) == 3
    assert network.calls["open_store"] == 3 * n
    # besides the extents' streams, only the snapshot's records: one tar per
    # node for the tree, one for the map page, one for the snapshot's head
    assert network.calls.get("store", 0) <= 3 * n
    for extent in record["ext"]:
        assert len({node for _, _, node in extent["shares"]}) == n  # n distinct nodes
        stream = sum(seg[2] for seg in extent["segs"])
        for index, key_hex, node_hex in extent["shares"]:
            node = network.nodes[bytes.fromhex(node_hex)]
            assert node.store.size(bytes.fromhex(key_hex), network.client_id) == stream
    assert sum(seg[1] for e in record["ext"] for seg in e["segs"]) == size
    retrieves = network.calls.get("retrieve", 0)
    assert _restores(world, tmp_path, src, manifest)
    # the k primaries' blocks of each segment, one ranged RETRIEVE each
    segments = sum(len(e["segs"]) for e in record["ext"])
    assert network.calls["retrieve"] - retrieves >= segments * k


def test_a_node_that_dies_mid_extent_has_the_extent_resent_elsewhere(world, tmp_path,
                                                                     monkeypatch):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1.5)
    victim = []
    real_feed = FakeStreamedStore.feed

    def feed(self, data):
        if not victim and len(self.received) > 0:
            victim.append(self.node.node_id)
            self.node.up = False
        return real_feed(self, data)

    monkeypatch.setattr(FakeStreamedStore, "feed", feed)
    summary, monitor, _ = run_backup(world, [src])
    assert victim and victim[0] in network.failed
    manifest, record = _large_record(world, summary)
    holders = {node for e in record["ext"] for _, _, node in e["shares"]}
    assert victim[0].hex() not in holders
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert _restores(world, tmp_path, src, manifest)


def test_a_stream_that_stalls_fails_its_extent_after_the_timeout(world, tmp_path, monkeypatch):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1)
    stalled = []
    real_feed = FakeStreamedStore.feed

    def feed(self, data):
        if not stalled or stalled[0] is self.node:
            stalled[:] = [self.node]
            return defer.Deferred()  # a node that never takes anything, never hangs up
        return real_feed(self, data)

    monkeypatch.setattr(FakeStreamedStore, "feed", feed)
    started = clock.seconds()
    summary, _, _ = run_backup(world, [src])
    assert clock.seconds() - started >= STALL_TIMEOUT
    assert stalled[0].node_id in network.failed
    manifest, record = _large_record(world, summary)
    assert stalled[0].node_id.hex() not in {n for e in record["ext"] for _, _, n in e["shares"]}
    assert _restores(world, tmp_path, src, manifest)


def test_an_extent_that_fails_everywhere_ends_with_store_failed(world, tmp_path, monkeypatch):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1)

    def refuse(self, key):
        return defer.fail(ConnectionError("refused"))

    monkeypatch.setattr(FakeStreamedStore, "finish", refuse)
    # Each attempt takes the node that refused out of service, so it is not
    # counted; the retries end when too few nodes are left for an extent.
    with pytest.raises(StoreFailed, match="failed 3 times|nodes are reachable"):
        run_backup(world, [src])
    assert len(network.failed) <= len(network.nodes)


def test_an_interrupted_backup_does_not_resend_committed_extents(world, tmp_path, monkeypatch):
    clock, home, network = world
    n = home.config["n"]
    src, _ = _large_tree(tmp_path, extents_count=3)
    opened = []
    real_open = network.open_store

    def open_until_the_third_extent(node_id, size):
        opened.append(node_id)
        if len(opened) > 2 * n:
            return defer.fail(ConnectionError("the network went away"))
        return real_open(node_id, size)

    monkeypatch.setattr(network, "open_store", open_until_the_third_extent)
    with pytest.raises(StoreFailed):
        run_backup(world, [src])
    monkeypatch.setattr(network, "open_store", real_open)
    network.failed.clear()
    before = network.calls["open_store"]
    summary, _, _ = run_backup(world, [src])
    # only the third extent and the fourth (the file's last 123 bytes)
    assert network.calls["open_store"] - before == 2 * n
    manifest, _ = _large_record(world, summary)
    assert _restores(world, tmp_path, src, manifest)


def test_verify_confirms_every_stream_and_names_a_corrupt_one(world, tmp_path):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    streams = [s for e in record["ext"] for s in e["shares"]]
    for round_number in (0, 1):  # the whole stream, then the spot check
        per_node, bad = run_until(clock, verify(network, home.secret, ShareSet.of_manifest(manifest), round_number))
        assert bad == []
        assert sum(v["confirmed"] for v in per_node.values()) >= len(streams)
    _, key_hex, node_hex = streams[0]
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))
    per_node, bad = run_until(clock, verify(network, home.secret, ShareSet.of_manifest(manifest), 0))
    assert bad == [(node_hex, key_hex, "corrupt")]


def test_a_segment_key_is_blake3_convergent_and_old_sha256_segments_still_restore(
        world, tmp_path, monkeypatch):
    from flud import crypto

    clock, home, network = world
    src, size = _large_tree(tmp_path, extents_count=1.2)
    with open(os.path.join(src, "large.bin"), "rb") as f:
        first = f.read(SEGMENT)
    summary, _, _ = run_backup(world, [src])
    manifest, record = _large_record(world, summary)
    key_hex = record["ext"][0]["segs"][0][0]
    assert key_hex == crypto.segment_convergence(home.secret, first)[1].hex()
    assert key_hex != crypto.file_convergence(home.secret, first)[1].hex()
    # a backup made when segments were keyed from SHA-256 restores all the same:
    # nothing at restore recomputes the digest
    monkeypatch.setattr("flud.client.backup.large_files.segment_convergence", crypto.file_convergence)
    old_src, _ = _large_tree(tmp_path / "old", extents_count=1.2, seed=2)
    summary, _, _ = run_backup(world, [old_src])
    manifest, record = _large_record(world, summary)
    with open(os.path.join(old_src, "large.bin"), "rb") as f:
        old_first = f.read(SEGMENT)
    assert record["ext"][0]["segs"][0][0] == crypto.file_convergence(home.secret, old_first)[1].hex()
    monkeypatch.undo()
    restored, _ = run_restore(world, str(tmp_path / "out-old"), manifest)
    assert restored["failed"] == 0
    assert compare_trees(old_src, str(tmp_path / "out-old" / "src")) == []
