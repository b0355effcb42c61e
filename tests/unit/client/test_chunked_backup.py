"""Large files in content-defined chunks: a change stores the chunks it
touches, not the rest of the file (issue 27). Sizes scaled down 16x from
the real ones (512 KiB chunks, 2 MiB segments, 32 MiB extents): the same
code, less to code. tools/bench/bench_cdc.py runs the full-size figure."""
import os
import random

import pytest

from flud.chunker import AVERAGE

from flud.client.repository import extents
from flud.client.prune import forget as forgetting
from flud.client.prune.retention import Policy
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, prune, stored_bytes
from tools.treecmp import compare_trees

SCALE = 16
CHUNK = AVERAGE // SCALE             # the chunks' average (the default's, scaled)
SEGMENT = 2 * 1024 * 1024 // SCALE
MIB = 1024 * 1024
UTC = __import__("datetime").timezone.utc


@pytest.fixture
def world(tmp_path, monkeypatch):
    clock, home, network = make_world(tmp_path, nodes=12)
    # One secret, so one gear table: where the cuts fall is the same every run
    # (an insert's cost varies with the cuts: over 100 tables, 1 MiB inserted
    # made a median 1.6 MiB of new chunks, 3.6 at the 99th percentile, of 4)
    home.secret = bytes(range(32))
    home.config.update(segment_size=SEGMENT, chunk_size=CHUNK)
    monkeypatch.setattr(extents, "EXTENT_BYTES", 32 * MIB // SCALE)
    return clock, home, network


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _restored(world, tmp_path, src, summary, name):
    manifest = snapshot_manifest(world, summary["snapshot"])
    restored, _ = run_restore(world, str(tmp_path / name), manifest)
    assert restored["failed"] == 0
    return compare_trees(src, str(tmp_path / name / "src")) == []


def _restored_as(world, tmp_path, summary, name, rel, expected) -> bool:
    """An earlier snapshot's file restores to the bytes it had then."""
    manifest = snapshot_manifest(world, summary["snapshot"])
    restored, _ = run_restore(world, str(tmp_path / name), manifest)
    assert restored["failed"] == 0
    with open(str(tmp_path / name / "src" / rel), "rb") as f:
        return f.read() == expected


def _sent(world, src):
    summary, _, _ = run_backup(world, [src])
    return summary, summary["bytes_sent"]


def test_an_insert_in_the_middle_sends_only_the_chunks_it_touched(world, tmp_path):
    """256 MiB with 1 MiB inserted at 100 MiB, scaled: the next backup sends
    at most n/k x 4 MiB (scaled) beyond what a backup of no change sends;
    every snapshot restores to its own bytes."""
    clock, home, network = world
    n, k = home.config["n"], home.config["k"]
    src = str(tmp_path / "src")
    rng = random.Random(27)
    data = rng.randbytes(256 * MIB // SCALE)
    _write(os.path.join(src, "disk.img"), data)
    first, sent = _sent(world, src)
    assert sent >= n / k * len(data)
    _, baseline = _sent(world, src)   # nothing changed: records and a head only
    insert_at = 100 * MIB // SCALE
    changed = data[:insert_at] + rng.randbytes(MIB // SCALE) + data[insert_at:]
    _write(os.path.join(src, "disk.img"), changed)
    second, sent = _sent(world, src)
    assert sent - baseline <= n / k * 4 * MIB / SCALE, (sent, baseline)
    assert second["bytes_known"] >= len(data) - 4 * MIB // SCALE
    assert _restored(world, tmp_path, src, second, "after")
    assert _restored_as(world, tmp_path, first, "before", "disk.img", data)


def test_an_append_and_a_moved_region_store_only_what_is_new(world, tmp_path):
    clock, home, network = world
    n, k = home.config["n"], home.config["k"]
    src = str(tmp_path / "src")
    rng = random.Random(3)
    data = rng.randbytes(64 * MIB // SCALE)
    _write(os.path.join(src, "log.bin"), data)
    _sent(world, src)
    _, baseline = _sent(world, src)
    grown = data + rng.randbytes(MIB // SCALE)
    _write(os.path.join(src, "log.bin"), grown)
    appended, sent = _sent(world, src)
    assert sent - baseline <= n / k * 3 * MIB / SCALE
    assert _restored(world, tmp_path, src, appended, "appended")
    # the file's halves swapped: every chunk but those at the two seams (and
    # the file's new start and end) is known
    half = len(grown) // 2
    _write(os.path.join(src, "log.bin"), grown[half:] + grown[:half])
    moved, sent = _sent(world, src)
    assert sent - baseline <= n / k * 8 * MIB / SCALE
    assert moved["bytes_known"] >= len(grown) - 8 * MIB // SCALE
    assert _restored(world, tmp_path, src, moved, "moved")
    # a copy of the file under another name costs its records only
    _write(os.path.join(src, "copy.bin"), grown[half:] + grown[:half])
    copied, sent = _sent(world, src)
    assert sent - baseline <= 64 * 1024
    assert copied["dedup"] == 1
    assert _restored(world, tmp_path, src, copied, "copied")


def test_prune_keeps_the_extents_a_later_snapshot_reuses(world, tmp_path):
    """The second snapshot names ranges of the first one's extents: once the
    first is forgotten and pruned, those extents stay and it restores; once
    nothing names them any more, they go, and no backup counts on them."""
    clock, home, network = world
    src = str(tmp_path / "src")
    rng = random.Random(9)
    data = rng.randbytes(48 * MIB // SCALE)
    _write(os.path.join(src, "a.bin"), data)
    run_backup(world, [src])
    changed = data[:MIB] + rng.randbytes(CHUNK) + data[MIB:]
    _write(os.path.join(src, "a.bin"), changed)
    second, _, _ = run_backup(world, [src])
    run_until(clock, forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                       say=lambda text: None))
    prune(world, now=1.0)
    prune(world, now=2.0)
    assert _restored(world, tmp_path, src, second, "kept")
    # the file goes: its extents are deleted, and their chunks leave the index
    os.unlink(os.path.join(src, "a.bin"))
    _write(os.path.join(src, "b.txt"), b"b")
    run_backup(world, [src])
    run_until(clock, forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                       say=lambda text: None))
    before = stored_bytes(world)
    prune(world, now=3.0)
    prune(world, now=4.0)
    assert stored_bytes(world) < before - len(changed)
    assert home.index.db.execute(
        "SELECT count(*) FROM segments WHERE seg_key LIKE 'C%'").fetchone()[0] == 0
    _write(os.path.join(src, "a.bin"), changed)
    again, _, _ = run_backup(world, [src])
    assert again["bytes_known"] == 0      # nothing was counted on that is gone
    assert _restored(world, tmp_path, src, again, "again")


def test_a_snapshot_of_fixed_extents_still_restores_and_its_file_is_chunked_next(
        world, tmp_path):
    clock, home, network = world
    src = str(tmp_path / "src")
    data = random.Random(4).randbytes(20 * MIB // SCALE)
    _write(os.path.join(src, "f.bin"), data)
    home.config["chunk_size"] = 0          # as flud wrote before chunks
    old, _, _ = run_backup(world, [src])
    record = next(r for r in snapshot_manifest(world, old["snapshot"])["contents"].values()
                  if r["t"] == "L")
    assert "runs" not in record
    home.config["chunk_size"] = CHUNK
    _write(os.path.join(src, "f.bin"), data + b"tail")
    new, _, _ = run_backup(world, [src])
    record = next(r for r in snapshot_manifest(world, new["snapshot"])["contents"].values()
                  if r["t"] == "L")
    assert "runs" in record
    assert _restored(world, tmp_path, src, new, "new")
    assert _restored_as(world, tmp_path, old, "old", "f.bin", data)


def test_a_stream_fed_again_from_an_extent_start_gives_the_file_chunks(tmp_path):
    """An extent sent again re-reads its bytes through the FeedingReader: the
    chunks are still the file's, each once, as the chunk pass finds them."""
    from flud.chunker import ChunkSizes
    from flud.client.backup.chunked import ChunkFeeder, chunk_file
    from flud.client.backup.source_scan import Entry
    from flud.client.records import FILE
    data = random.Random(8).randbytes(3 * MIB)
    path = str(tmp_path / "f.bin")
    _write(path, data)
    sizes, key = ChunkSizes(CHUNK), b"i" * 32
    feeder = ChunkFeeder(b"s" * 32, sizes, key)
    for start, end in [(0, MIB), (MIB, 2 * MIB), (MIB, 2 * MIB), (2 * MIB, 3 * MIB)]:
        feeder.feed(start, data[start:end])
    entry = Entry(path, FILE, 0o644, os.stat(path).st_mtime_ns, len(data))
    assert feeder.finish() == chunk_file(entry, b"s" * 32, sizes, key)
    with pytest.raises(ValueError):
        feeder.feed(4 * MIB, b"x")   # a gap: never silently skipped


def test_a_compressible_file_changed_in_the_middle_restores_from_ranges_of_compressed_segments(
        world, tmp_path):
    """Runs that start and end inside compressed segments: restored whole,
    decompressed, then cut to the run's range."""
    from tests.unit.core.test_compression import text
    src = str(tmp_path / "src")
    data = text(24 * MIB // SCALE, seed=5)
    _write(os.path.join(src, "app.log"), data)
    first, _, _ = run_backup(world, [src])
    at = len(data) // 3
    _write(os.path.join(src, "app.log"), data[:at] + text(MIB // SCALE, seed=6) + data[at:])
    second, _, _ = run_backup(world, [src])
    assert second["bytes_known"] > len(data) // 2
    record = next(r for r in snapshot_manifest(world, second["snapshot"])["contents"].values()
                  if r["t"] == "L")
    assert any(len(seg) == 6 for e in record["ext"] for seg in e["segs"])   # compressed
    assert len(record["runs"]) >= 3
    assert _restored(world, tmp_path, src, second, "after")
    assert _restored_as(world, tmp_path, first, "before", "app.log", data)
