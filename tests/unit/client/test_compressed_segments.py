"""A large file's segments are compressed before they are encrypted (unless
they will not compress), their extents' streams hold the stored bytes, and a
restore decompresses each such segment whole before it writes it."""
import copy
import os
import random

import pytest

from flud.client.repository import extents
from flud.client.records import BadSegmentRecord, ExtentSegment
from tests.unit.client.fakes import make_world, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.core.test_compression import text
from tools.treecmp import compare_trees

SEGMENT = 64 * 1024
MIB = 1024 * 1024


@pytest.fixture
def world(tmp_path, monkeypatch):
    clock, home, network = make_world(tmp_path, nodes=12)
    home.config["segment_size"] = SEGMENT
    monkeypatch.setattr(extents, "EXTENT_BYTES", 16 * SEGMENT)
    return clock, home, network


def _tree(root, files):
    """files: {name: bytes}; a small file beside them."""
    os.makedirs(root)
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    with open(os.path.join(root, "small.txt"), "wb") as f:
        f.write(b"a small file beside\n" * 10)
    return root


def _large_records(world, summary):
    manifest = snapshot_manifest(world, summary["snapshot"])
    entries = {e[0].split("/", 1)[1]: e for e in manifest["entries"] if e[1] == "file"}
    return manifest, {name: manifest["contents"][e[5]] for name, e in entries.items()
                      if manifest["contents"][e[5]]["t"] == "L"}


def _segments(record):
    return [ExtentSegment.from_wire(row) for e in record["ext"] for row in e["segs"]]


def _restore(world, tmp_path, manifest, out="out", **options):
    dest = str(tmp_path / out)
    summary, job = run_restore(world, dest, manifest, **options)
    return summary, job, os.path.join(dest, "src")


def test_a_compressible_file_is_stored_compressed_and_restores_identical(world, tmp_path):
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    size = int(2.5 * extents.EXTENT_BYTES) + 4000
    src = _tree(str(tmp_path / "src"), {"text.log": text(size)})
    summary, _, _ = run_backup(world, [src])
    manifest, records = _large_records(world, summary)
    record = records["text.log"]
    segments = _segments(record)
    assert len(segments) == -(-size // SEGMENT)
    assert sum(s.length for s in segments) == size  # plaintext lengths: file offsets
    for seg in segments:
        assert seg.method == "zstd" and seg.stored < seg.length // 2
        assert seg.block_length == -(-seg.stored // k)  # the blocks hold the stored bytes
    # each stream is its segments' (shorter) blocks back to back, and that is all
    stored_on_nodes = 0
    for extent in record["ext"]:
        stream = sum(row[2] for row in extent["segs"])
        for _, key_hex, node_hex in extent["shares"]:
            node = network.nodes[bytes.fromhex(node_hex)]
            assert node.store.size(bytes.fromhex(key_hex), network.client_id) == stream
            stored_on_nodes += stream
    assert stored_on_nodes < size * n // k // 2
    for by_blocks in (True, False):
        restored, _, out = _restore(world, tmp_path, manifest, out=f"out-{by_blocks}",
                                    by_blocks=by_blocks)
        assert restored["failed"] == restored["bad_shares"] == 0
        assert compare_trees(src, out) == []


def test_media_is_stored_as_it_is_and_a_mixed_file_segment_by_segment(world, tmp_path):
    clock, home, network = world
    rng = random.Random(3)
    noise = rng.randbytes(20 * SEGMENT + 5)  # large files: 1 MiB and more
    mixed = text(6 * SEGMENT) + rng.randbytes(6 * SEGMENT) + text(5 * SEGMENT + 4000)
    src = _tree(str(tmp_path / "src"), {"video.mp4": noise, "mixed.img": mixed})
    summary, _, _ = run_backup(world, [src])
    manifest, records = _large_records(world, summary)
    # written exactly as before compression existed: four fields a segment
    assert all(len(row) == 4 for e in records["video.mp4"]["ext"] for row in e["segs"])
    assert [s.method for s in _segments(records["mixed.img"])] == ["zstd"] * 6 + [None] * 6 + \
        ["zstd"] * 6
    restored, _, out = _restore(world, tmp_path, manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, out) == []


def test_the_same_file_compresses_to_the_same_segments_and_dedups(world, tmp_path):
    clock, home, network = world
    data = text(20 * SEGMENT + 9, seed=7)
    first = _tree(str(tmp_path / "one" / "src"), {"a.txt": data})
    summary, _, _ = run_backup(world, [first])
    _, records = _large_records(world, summary)
    stores = network.calls["open_store"]
    second = _tree(str(tmp_path / "two" / "src"), {"copy.txt": data})
    summary, _, _ = run_backup(world, [second])
    _, again = _large_records(world, summary)
    assert again["copy.txt"] == records["a.txt"]  # same keys, stored lengths, streams
    assert network.calls["open_store"] == stores  # nothing of it sent again


def test_a_snapshot_written_before_compression_still_restores(world, tmp_path, monkeypatch):
    """A compressible file backed up the way flud did before (every segment
    stored as it is, four fields a segment) restores with this flud."""
    clock, home, network = world
    src = _tree(str(tmp_path / "src"), {"text.log": text(40 * SEGMENT + 1)})
    monkeypatch.setattr("flud.client.backup.plans.plan_pieces",
                        lambda sample, pieces, length: (None, length))
    summary, _, _ = run_backup(world, [src])
    monkeypatch.undo()
    manifest, records = _large_records(world, summary)
    assert all(len(row) == 4 for e in records["text.log"]["ext"] for row in e["segs"])
    restored, _, out = _restore(world, tmp_path, manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, out) == []


def _break_streams(network, record, count):
    """The first extent's first `count` streams read back corrupt."""
    for _, key_hex, node_hex in record["ext"][0]["shares"][:count]:
        network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))


@pytest.mark.parametrize("damaged", [1, 5])
def test_a_damaged_compressed_segment_fails_as_a_damaged_plain_one(world, tmp_path, damaged):
    """n-k damaged streams: repaired from the others, either way. More: the
    file fails with the same words whether its segments were compressed."""
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    src = _tree(str(tmp_path / "src"), {"text.log": text(20 * SEGMENT),
                                        "noise.bin": random.Random(5).randbytes(20 * SEGMENT)})
    summary, _, _ = run_backup(world, [src])
    manifest, records = _large_records(world, summary)
    assert _segments(records["text.log"])[0].method == "zstd"
    assert _segments(records["noise.bin"])[0].method is None
    for record in records.values():
        _break_streams(network, record, damaged)
    restored, job, out = _restore(world, tmp_path, manifest)
    assert restored["bad_shares"] >= 2 * damaged
    if damaged <= n - k:
        assert restored["failed"] == 0
        assert compare_trees(src, out) == []
        return
    assert restored["failed"] == 2
    why = dict(job.failed)
    prefix = f"only {k - 1} of the {k} shares needed for a segment could be fetched"
    assert why["src/text.log"].startswith(prefix), why
    assert why["src/noise.bin"].startswith(prefix), why
    assert sorted(os.listdir(out)) == ["small.txt"]  # nothing half written left behind


def test_a_compressed_segment_whose_record_lies_fails_its_file_clearly(world, tmp_path):
    """Blocks that match their hashes but not the record's lengths (a record
    damaged or forged): the file fails with a FetchFailed, nothing written."""
    clock, home, network = world
    src = _tree(str(tmp_path / "src"), {"text.log": text(20 * SEGMENT),
                                        "other.log": text(20 * SEGMENT, seed=9)})
    summary, _, _ = run_backup(world, [src])
    manifest, records = _large_records(world, summary)
    manifest = copy.deepcopy(manifest)
    cid = next(e[5] for e in manifest["entries"] if e[0].endswith("text.log"))
    manifest["contents"][cid]["ext"][0]["segs"][1][1] -= 1  # one plaintext byte short
    restored, job, out = _restore(world, tmp_path, manifest)
    assert restored["failed"] == 1
    why = dict(job.failed)["src/text.log"]
    assert "compressed segment of the file is damaged" in why, why
    assert sorted(os.listdir(out)) == ["other.log", "small.txt"]
    # one that claims more plaintext than a segment holds
    manifest["contents"][cid]["ext"][0]["segs"][1][1] = 10 * SEGMENT
    restored, job, out = _restore(world, tmp_path, manifest, out="out2")
    assert "more than a segment" in dict(job.failed)["src/text.log"]


def test_a_method_this_flud_does_not_know_fails_its_file_alone(world, tmp_path):
    clock, home, network = world
    src = _tree(str(tmp_path / "src"), {"text.log": text(20 * SEGMENT),
                                        "other.log": text(20 * SEGMENT, seed=9)})
    summary, _, _ = run_backup(world, [src])
    manifest, _ = _large_records(world, summary)
    manifest = copy.deepcopy(manifest)
    cid = next(e[5] for e in manifest["entries"] if e[0].endswith("text.log"))
    manifest["contents"][cid]["ext"][-1]["segs"][-1][4] = "brotli"
    retrieves = network.calls.get("retrieve", 0)
    restored, job, out = _restore(world, tmp_path, manifest)
    assert restored["failed"] == 1
    why = dict(job.failed)["src/text.log"]
    assert "'brotli'" in why and "newer flud" in why, why
    assert sorted(os.listdir(out)) == ["other.log", "small.txt"]
    assert network.calls["retrieve"] > retrieves  # the others were fetched


def test_a_segment_row_of_a_shape_this_flud_does_not_know_is_refused():
    row = ["ab" * 32, 100, 10, "cd" * 8]
    assert ExtentSegment.from_wire(row).to_wire() == row
    compressed = row + ["zstd", 37]
    seg = ExtentSegment.from_wire(compressed)
    assert (seg.method, seg.stored) == ("zstd", 37) and seg.to_wire() == compressed
    for bad in (row + ["zstd"], compressed + [1], row[:3]):
        with pytest.raises(BadSegmentRecord, match="newer flud"):
            ExtentSegment.from_wire(bad)


def test_a_compressible_file_keeps_to_one_segment_footprint(tmp_path):
    """At the default 2 MiB segments: the backup reserves one segment's
    footprint for the file (compressed in place, no second buffer) and the
    restore stays in its window."""
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(str(tmp_path / "src"), {"text.log": text(6 * MIB + 11)})
    summary, monitor, _ = run_backup(world, [src])
    assert monitor.peak_transfer_bytes <= 4 * MIB
    manifest, records = _large_records(world, summary)
    assert _segments(records["text.log"])[0].method == "zstd"
    restored, job, out = _restore(world, tmp_path, manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, out) == []
    assert job.ctx.monitor.peak_transfer_bytes <= 4 * MIB


def test_plans_read_only_a_sample_of_media_and_run_one_extent_ahead(world, tmp_path,
                                                                   monkeypatch):
    from flud.client.backup import plans as plans_module
    from flud.workers import CPUPool

    clock, home, network = world
    read = []
    real_read = plans_module.ExtentPlans._read
    monkeypatch.setattr(plans_module.ExtentPlans, "_read",
                        lambda self, offset, view: (read.append(len(view)),
                                                    real_read(self, offset, view)))
    src = _tree(str(tmp_path / "src"), {"clip.mp4": random.Random(4).randbytes(40 * SEGMENT),
                                        "text.log": text(40 * SEGMENT)})
    entry = type("Entry", (), {"path": os.path.join(src, "clip.mp4"), "size": 40 * SEGMENT})
    plans = plans_module.ExtentPlans(CPUPool(clock, inline=True), entry, SEGMENT, 16)
    first = []
    plans.get(0).addCallback(first.append)
    assert first and all(plan == (None, SEGMENT) for plan in first[0])
    assert set(plans._made) == {0, 16}  # the next extent is planned already
    assert sum(read) == 32 * 8 * 4096   # their samples only: 32 KiB a segment
    plans.get(16)
    assert set(plans._made) == {0, 16, 32}
    done = []
    plans.close().addCallback(done.append)
    assert done == [None]
    # a compressible file is read whole by its plan
    read.clear()
    entry.path, entry.size = os.path.join(src, "text.log"), 40 * SEGMENT
    plans = plans_module.ExtentPlans(CPUPool(clock, inline=True), entry, SEGMENT, 16)
    plans.get(0)
    assert sum(read) >= 32 * SEGMENT
    plans.close()


def test_a_file_that_changes_between_its_plan_and_its_sending_is_skipped(world, tmp_path,
                                                                       monkeypatch):
    from flud.client.backup import plans as plans_module

    clock, home, network = world
    src = _tree(str(tmp_path / "src"), {"text.log": text(20 * SEGMENT)})
    real_plan = plans_module.ExtentPlans._plan

    def stale_plan(self, first, count):  # as if the file read otherwise then
        return [(method, stored + 1 if method else stored)
                for method, stored in real_plan(self, first, count)]

    monkeypatch.setattr(plans_module.ExtentPlans, "_plan", stale_plan)
    summary, _, job = run_backup(world, [src])
    assert summary["skipped"] == 1 and summary["files"] == 1   # the small file went
    monkeypatch.undo()
    # a file that shrank under its plan: the plan fails, and so does the file, alone
    with open(os.path.join(src, "text.log"), "r+b") as f:
        f.truncate(18 * SEGMENT)
    real_read = plans_module.ExtentPlans._read

    def short_read(self, offset, view):
        if offset >= 17 * SEGMENT:
            raise plans_module.FileChanged("text.log changed while it was backed up")
        return real_read(self, offset, view)

    monkeypatch.setattr(plans_module.ExtentPlans, "_read", short_read)
    summary, _, _ = run_backup(world, [src])
    assert summary["skipped"] == 1

