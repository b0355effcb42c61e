"""`restore --overwrite if-changed` over files cut into chunks (issue 27):
the file in place is cut again with the same keyed chunker and its content
id compared, so a file that holds the snapshot's bytes is not fetched, one
that differs is, and a killed run's whole temp is used. Sizes scaled as in
test_chunked_backup.py."""
import os
import random

from flud.chunker import AVERAGE
from flud.client.home import DEFAULTS
from flud.client.repository import extents
from flud.client.restore import restore_job
from flud.client.restore.overwrite import resume_temp
from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup
from tests.unit.client.test_restore_overwrite import _leftovers, _restore
from tools.treecmp import compare_trees

SCALE = 16
CHUNK = AVERAGE // SCALE
SEGMENT = 2 * 1024 * 1024 // SCALE
MIB = 1024 * 1024


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _world(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=10)
    home = world[1]
    home.secret = bytes(range(32))
    home.config.update(segment_size=SEGMENT, chunk_size=CHUNK)
    monkeypatch.setattr(extents, "EXTENT_BYTES", 32 * MIB // SCALE)
    return world


def test_new_homes_cut_large_files_into_chunks_by_default():
    assert DEFAULTS["chunk_size"] == AVERAGE


def test_if_changed_keeps_a_chunked_file_in_place_and_fetches_one_that_differs(
        tmp_path, monkeypatch):
    world = _world(tmp_path, monkeypatch)
    src = str(tmp_path / "src")
    rng = random.Random(27)
    data = rng.randbytes(24 * MIB // SCALE)
    _write(os.path.join(src, "disk.img"), data)
    run_backup(world, [src])
    # an insert: the next snapshot's record is runs over ranges of extents
    changed = data[:7 * MIB // SCALE] + rng.randbytes(CHUNK) + data[7 * MIB // SCALE:]
    _write(os.path.join(src, "disk.img"), changed)
    summary, _, _ = run_backup(world, [src])
    assert summary["bytes_known"] > 0
    out = str(tmp_path / "out")
    first, _ = _restore(world, out)
    assert first["failed"] == 0 and first["fetched_bytes"] >= len(changed)
    again, _ = _restore(world, out, "if-changed")
    assert again["fetched_bytes"] == 0 and again["retrieves"] == 0
    assert again["unchanged"] == 1 and again["files"] == 0
    # same size, same mtime, one byte differs: fetched, never kept
    restored = os.path.join(out, "src", "disk.img")
    with open(restored, "r+b") as f:
        f.seek(len(changed) - 5)
        f.write(b"X")
    stat = os.stat(os.path.join(src, "disk.img"))
    os.utime(restored, ns=(stat.st_mtime_ns, stat.st_mtime_ns))
    third, _ = _restore(world, out, "if-changed")
    assert third["replaced"] == 1 and third["fetched_bytes"] > 0
    assert compare_trees(src, os.path.join(out, "src")) == [] and _leftovers(out) == []


def test_a_killed_runs_whole_temp_of_a_chunked_file_is_renamed_not_fetched(
        tmp_path, monkeypatch):
    world = _world(tmp_path, monkeypatch)
    src = str(tmp_path / "src")
    data = random.Random(5).randbytes(40 * MIB // SCALE)
    _write(os.path.join(src, "f.bin"), data)
    run_backup(world, [src])
    out = str(tmp_path / "out")
    temps = []   # the fixed temp name the restore writes the file under
    monkeypatch.setattr(restore_job, "resume_temp",
                        lambda name, ref: temps.append(resume_temp(name, ref)) or temps[-1])
    _restore(world, out)
    restored = os.path.join(out, "src", "f.bin")
    # as a killed run leaves it: the whole content in the temp, the file gone
    os.rename(restored, os.path.join(out, "src", temps[-1]))
    again, _ = _restore(world, out, "if-changed")
    assert again["fetched_bytes"] == 0 and again["resumed"] == 1
    assert compare_trees(src, os.path.join(out, "src")) == [] and _leftovers(out) == []
