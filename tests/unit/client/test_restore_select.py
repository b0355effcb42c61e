"""`flud restore --include/--exclude/--delete` (issue 28, item 3) on the
in-memory network: the selection decides what is restored and what --delete
may remove, and --delete never reaches outside the directories restored."""
import os

import pytest

from flud.client.pathmatch import PatternError
from flud.client.restore.file_writer import RestoreError
from tests.unit.client.test_restore_overwrite import _restore, world  # noqa: F401 (fixture)


def _files(root) -> list:
    return sorted(os.path.relpath(os.path.join(d, name), root)
                  for d, dirs, names in os.walk(root) for name in names + [
                      x for x in dirs if os.path.islink(os.path.join(d, x))])


def test_include_restores_only_what_matches_with_its_directories_times(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    summary, _ = _restore(world, out, include=["f1.txt", "/src/b/c/f4.txt"])
    assert _files(out) == ["src/a/f1.txt", "src/b/c/f1.txt", "src/b/c/f4.txt"]
    assert summary["files"] == 3 and summary["failed"] == 0
    for rel in ("src/a", "src/b", "src/b/c"):   # made for what is under them, with their times
        assert os.stat(os.path.join(out, rel)).st_mtime_ns == \
            os.stat(os.path.join(src, rel[4:])).st_mtime_ns


def test_include_takes_the_original_absolute_path(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    _restore(world, out, include=[os.path.join(src, "b") + "/"])
    assert _files(out) == ["src/b/c/" + f"f{i}.txt" for i in range(6)] + ["src/b/empty"]


def test_exclude_prunes_a_directory_and_a_negation_keeps_a_file(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    summary, _ = _restore(world, out, exclude=["c/", "*.txt", "!f2.txt"])
    assert _files(out) == ["src/a/big.bin", "src/a/f2.txt", "src/b/empty", "src/link"]
    assert not os.path.exists(os.path.join(out, "src", "b", "c"))


def test_a_bad_pattern_is_named():
    from flud.client.restore.selection import Selection
    with pytest.raises(PatternError, match="--exclude"):
        Selection(exclude=["a/***b[" + "\0"])


def test_delete_removes_what_the_snapshot_lacks_inside_the_restored_tree_only(world,
                                                                            tmp_path):
    world, src = world
    out = tmp_path / "out"
    _restore(world, str(out))
    (out / "src" / "a" / "stray.txt").write_text("not in the snapshot")
    (out / "src" / "b" / "c" / "old").mkdir()
    (out / "src" / "b" / "c" / "old" / "x").write_text("x")
    (out / "src" / "a" / "f0.txt").unlink()
    (out / "src" / "a" / "f0.txt").mkdir()      # a directory where a file belongs
    (out / "beside-the-roots.txt").write_text("DEST's own: never touched")
    (out / "src" / "kept.log").write_text("excluded: left alone")
    summary, job = _restore(world, str(out), "if-changed", delete=True, exclude=["*.log"])
    assert summary["failed"] == 0
    assert sorted(p for p, _ in job.deleted_paths) == ["src/a/f0.txt", "src/a/stray.txt",
                                                       "src/b/c/old"]
    assert (out / "beside-the-roots.txt").exists() and (out / "src" / "kept.log").exists()
    with open(os.path.join(src, "a", "f0.txt"), "rb") as f:
        assert (out / "src" / "a" / "f0.txt").read_bytes() == f.read()
    assert summary["fetched_bytes"] < 10_000   # only f0.txt came again


def test_delete_with_a_path_stays_within_it(world, tmp_path):
    world, src = world
    out = tmp_path / "out"
    _restore(world, str(out))
    (out / "src" / "a" / "stray.txt").write_text("outside the PATH")
    (out / "src" / "b" / "stray.txt").write_text("inside the PATH")
    summary, job = _restore(world, str(out), "if-changed", paths=["src/b"], delete=True)
    assert [p for p, _ in job.deleted_paths] == ["src/b/stray.txt"]
    assert (out / "src" / "a" / "stray.txt").exists()


def test_delete_is_refused_with_overwrite_never_and_around_the_clients_home(world, tmp_path):
    world, src = world
    with pytest.raises(RestoreError, match="--overwrite"):
        _restore(world, str(tmp_path / "out"), delete=True)
    clock, home, network = world
    with pytest.raises(RestoreError, match="holds this client's home"):
        _restore(world, os.path.dirname(home.path), "always", delete=True)


def _state(root) -> dict:
    """Every path under root with its kind, size and mtime."""
    out = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            info = os.lstat(os.path.join(folder, name))
            out[os.path.relpath(os.path.join(folder, name), root)] = (
                info.st_mode, info.st_size, info.st_mtime_ns)
    return out


def _dry(world, dest, overwrite, **selection):
    from flud.client.context import JobContext
    from flud.client.progress import Progress
    from flud.client.restore.dry_run import DryRun
    from flud.client.restore.tree_restore import TreeRestore
    from flud.client.repository.snapshot_lookup import find_snapshot
    from flud.coding import SegmentCoder
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool
    from tests.unit.client.fakes import run_until
    clock, home, network = world
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("restore", quiet=True),
                     SegmentCoder(home.config["k"], home.config["n"]), clock.seconds)
    found = run_until(clock, find_snapshot(ctx))
    try:
        job = DryRun(ctx, overwrite)
        return run_until(clock, TreeRestore(job, found.repo, found.record,
                                            **selection).run(dest)), job
    finally:
        found.close()


def test_a_dry_run_says_what_would_happen_and_touches_nothing(world, tmp_path):
    world, src = world
    out = tmp_path / "out"
    _restore(world, str(out))
    with open(out / "src" / "a" / "big.bin", "r+b") as f:   # one segment differs
        f.write(b"changed")
    (out / "src" / "b" / "c" / "f2.txt").unlink()
    (out / "src" / "a" / "stray.txt").write_text("would go")
    before = _state(out)
    summary, job = _dry(world, str(out), "if-changed", delete=True)
    assert _state(out) == before
    assert summary["unchanged"] == 12 and summary["replaced"] == 1 and summary["new"] == 1
    assert summary["fetch_bytes"] == 2 * 1024 * 1024 + (500 + 300 * 2)   # a segment, f2.txt
    assert [p for p, _ in job.deleted_paths] == ["src/a/stray.txt"]
    never, _ = _dry(world, str(out), "never")
    assert never["beside"] == 13 and never["new"] == 1 and _state(out) == before
    missing, _ = _dry(world, str(tmp_path / "nowhere"), "if-changed", delete=True)
    assert missing["new"] == 14 and not (tmp_path / "nowhere").exists()
