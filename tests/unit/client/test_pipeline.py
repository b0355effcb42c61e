"""Backup and restore end to end over an in-memory network, on a fake clock."""
import os
import random

import pytest

from flud.client.backup import backup_job as backup_module
from flud.client.backup.backup_job import Backup
from flud.client.home import create_home
from flud.client.progress import Progress
from flud.client.restore.restore_job import Restore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import (FakeNetwork, FakeReactor, down_once_storing, make_world,
                                     run_until, snapshot_manifest)
from tools.treecmp import compare_trees

MIB = 1024 * 1024


def make_tree(root, rng, large=(3 * MIB, 2 * MIB + 17), small=40):
    os.makedirs(os.path.join(root, "sub", "deeper"))
    os.makedirs(os.path.join(root, "empty"))
    for i, size in enumerate(large):
        with open(os.path.join(root, f"large-{i}.bin"), "wb") as f:
            f.write(rng.randbytes(size))
    for i in range(small):
        folder = os.path.join(root, "sub" if i % 2 else "sub/deeper")
        with open(os.path.join(folder, f"small-{i}.txt"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 50_000)))
    with open(os.path.join(root, "empty-file"), "wb"):
        pass
    os.symlink("sub/deeper", os.path.join(root, "link"))
    os.chmod(os.path.join(root, "sub", "small-1.txt"), 0o600)


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def run_backup(world, paths, budget=64 * MIB):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=budget)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds)
    return run_until(clock, job.run(paths)), monitor, job


def run_restore(world, dest, manifest, paths=(), **options):
    """options: Restore's (how large files are restored)."""
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Restore(clock, home, network, CPUPool(clock, inline=True), monitor,
                  Progress("restore", quiet=True), manifest,
                  **{"block_writer": InlineBlockWriter, **options})
    return run_until(clock, job.run(dest, paths)), job


def test_round_trip_is_identical(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(1))
    summary, _, _ = run_backup(world, [src])
    assert summary["new"] == 43 and summary["skipped"] == 0
    manifest = snapshot_manifest(world, summary["snapshot"])
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_unchanged_tree_sends_no_file_data(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(2))
    run_backup(world, [src])
    stores_before = world[2].calls.get("store", 0)
    again, _, _ = run_backup(world, [src])
    assert again["unchanged"] == 43 and again["new"] == again["changed"] == 0
    assert again["bytes_read"] == 0
    # no file data and no directory record: only the snapshot's map page
    # (one tar per node) and its head (snapshot record and map index: one more)
    assert world[2].calls["store"] - stores_before == 2 * world[1].config["n"]


def test_budget_bounds_concurrent_uploads_and_all_complete(world, tmp_path, monkeypatch):
    """Many large files at once against a budget of two segments: buffered
    bytes never pass the budget, and every file still lands."""
    monkeypatch.setattr(backup_module, "LARGE_FILES_AT_ONCE", 6)
    src = str(tmp_path / "src")
    rng = random.Random(3)
    os.makedirs(src)
    for i in range(6):
        with open(os.path.join(src, f"big-{i}"), "wb") as f:
            f.write(rng.randbytes(3 * MIB + i))
    clock, home, network = world
    footprint = MIB + (MIB // 4) * 4  # ciphertext + 4 parity shares at 4-of-8
    summary, monitor, _ = run_backup(world, [src], budget=2 * footprint)
    assert summary["new"] == 6
    assert 0 < monitor.peak_buffered_bytes <= 2 * footprint
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world, 1))
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_restore_survives_n_minus_k_lost_nodes_and_a_corrupt_share(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(4))
    summary, _, _ = run_backup(world, [src])
    clock, home, network = world
    manifest = snapshot_manifest(world, summary["snapshot"])
    big = next(r for r in manifest["contents"].values() if r["t"] == "L")
    holders = [bytes.fromhex(node) for _, _, node in big["ext"][0]["shares"]]
    for node_id in holders[:home.config["n"] - home.config["k"] - 1]:
        network.nodes[node_id].up = False
    # the first primary still up is asked for sure: corrupt its share
    index, key_hex, node_hex = big["ext"][0]["shares"][home.config["n"] - home.config["k"] - 1]
    bad_key = bytes.fromhex(key_hex)
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bad_key)
    restored, job = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
    assert any(key == bad_key.hex() for _, key, why in job.bad_shares if "corrupt" in why)


def test_restore_never_overwrites(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(5), large=(), small=3)
    summary, _, _ = run_backup(world, [src])
    out = tmp_path / "out" / "src"
    os.makedirs(out)
    (out / "empty-file").write_bytes(b"mine")
    restored, _ = run_restore(world, str(tmp_path / "out"),
                              snapshot_manifest(world, summary["snapshot"]))
    assert (out / "empty-file").read_bytes() == b"mine"
    assert (out / "empty-file.flud-restored").read_bytes() == b""
    assert restored["beside"] == 1


def test_a_small_file_costs_one_ranged_retrieve(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(6), large=(), small=30)
    summary, _, _ = run_backup(world, [src])
    manifest = snapshot_manifest(world, summary["snapshot"])
    before = world[2].calls.get("retrieve", 0)
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest, ["src/sub/small-3.txt"])
    assert restored["files"] == 1
    assert world[2].calls["retrieve"] - before <= 2  # one, or two if it straddles blocks
    with open(os.path.join(src, "sub", "small-3.txt"), "rb") as f:
        assert (tmp_path / "out" / "src" / "sub" / "small-3.txt").read_bytes() == f.read()


def test_too_few_nodes_ends_with_store_failed_not_a_hang(world, tmp_path):
    """With fewer live nodes than n, a large file's segments fail cleanly."""
    from flud.client.repository.segments import StoreFailed
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "big"), "wb") as f:
        f.write(random.Random(7).randbytes(3 * MIB))
    clock, home, network = world
    down_once_storing(network, list(network.nodes)[:6])   # 12 nodes, 6 down: n=8 cannot be met
    with pytest.raises(StoreFailed):
        run_backup(world, [src])


def test_large_files_are_restored_a_few_at_a_time(world, tmp_path):
    """Each in its own window: a home of many files a few MiB large restores
    faster than one file after the other, and memory stays bounded."""
    from flud.client.restore.restore_job import LARGE_IN_FLIGHT

    src = str(tmp_path / "src")
    os.makedirs(src)
    rng = random.Random(5)
    for i in range(LARGE_IN_FLIGHT + 3):
        with open(os.path.join(src, f"big-{i}"), "wb") as f:
            f.write(rng.randbytes(2 * MIB + 1000 * i))
    summary, _, _ = run_backup(world, [src])
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    open_now, most = [0], [0]
    make_transfer = monitor.transfer

    def transfer(kind, name):
        made = make_transfer(kind, name)
        if kind == "download":
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
            close = made.close
            made.close = lambda: (open_now.__setitem__(0, open_now[0] - 1), close())
        return made

    monitor.transfer = transfer
    job = Restore(clock, home, network, CPUPool(clock, inline=True), monitor,
                  Progress("restore", quiet=True), snapshot_manifest(world, summary["snapshot"]),
                  block_writer=InlineBlockWriter)
    restored = run_until(clock, job.run(str(tmp_path / "out")))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
    assert most[0] == LARGE_IN_FLIGHT and open_now[0] == 0


def test_a_part_is_restored_by_its_original_absolute_path(world, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src, random.Random(7))
    summary, _, _ = run_backup(world, [src])
    manifest = snapshot_manifest(world, summary["snapshot"])
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest,
                              [os.path.join(src, "sub", "deeper")])
    assert restored["failed"] == 0
    assert compare_trees(os.path.join(src, "sub", "deeper"),
                         str(tmp_path / "out" / "src" / "sub" / "deeper")) == []
    assert not os.path.exists(tmp_path / "out" / "src" / "large-0.bin")
