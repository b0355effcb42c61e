"""forget, tag and prune over the in-memory network, on a fake clock: what a
forgotten snapshot alone reached leaves the nodes (after two runs past the
grace), what a kept one reaches never does, and a repack moves a mostly
dead bundle's live files without changing what restores."""
import datetime
import os
import random

import pytest

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.prune import forget as forgetting
from flud.client.prune.forget import ForgetError
from flud.client.prune.prune_job import Prune
from flud.client.prune.retention import Policy
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees

UTC = datetime.timezone.utc
DAY = 86400.0


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def ctx_of(world):
    clock, home, network = world
    return JobContext(clock, home, network, CPUPool(clock, inline=True),
                      MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                      Progress("prune", quiet=True),
                      SegmentCoder(home.config["k"], home.config["n"]), clock.seconds)


def stored_bytes(world) -> int:
    return sum(node.store.stats()["bytes_stored"] for node in world[2].nodes.values())


def write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def prune(world, now, grace=0.0, **options):
    job = Prune(ctx_of(world), grace=grace, now=lambda: now, say=lambda line: None, **options)
    return run_until(world[0], job.run())


def test_forget_then_prune_gives_back_what_only_the_forgotten_snapshot_reached(world, tmp_path):
    src = str(tmp_path / "src")
    rng = random.Random(5)
    for i in range(30):
        write(os.path.join(src, "keep", f"k{i}.bin"), rng.randbytes(3000))
    write(os.path.join(src, "old", "big.bin"), rng.randbytes(3 * 1024 * 1024))
    run_backup(world, [src])
    os.unlink(os.path.join(src, "old", "big.bin"))       # only snapshot 1 has it
    run_backup(world, [src])
    before = stored_bytes(world)
    kept, removed, _ = run_until(world[0], forgetting.forget(
        ctx_of(world), Policy(forget=("1",)), False, UTC, say=lambda text: None))
    assert (kept, removed) == (1, 1)
    first = prune(world, now=1000.0)
    assert first["deleted"] == 0 and first["marked"] >= 1   # found unreferenced: marked only
    assert stored_bytes(world) >= before
    second = prune(world, now=2000.0)
    assert second["deleted"] >= 1 and second["shares_deleted"] >= 8
    # the large file's extent (3 MiB at n/k = 2) is gone from the nodes
    assert before - stored_bytes(world) > 5 * 1024 * 1024
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
    third = prune(world, now=3000.0)   # nothing more to do, nothing a kept snapshot needs
    assert third["deleted"] == 0


def test_the_grace_period_holds_deletes_back(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.bin"), random.Random(1).randbytes(2 * 1024 * 1024))
    run_backup(world, [src])
    write(os.path.join(src, "a.bin"), random.Random(2).randbytes(2 * 1024 * 1024))
    run_backup(world, [src])
    run_until(world[0], forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                          say=lambda text: None))
    prune(world, now=0.0, grace=DAY)
    assert prune(world, now=DAY / 2, grace=DAY)["deleted"] == 0    # within the grace
    assert prune(world, now=DAY + 1, grace=DAY)["deleted"] >= 1    # past it


def test_a_protected_snapshot_cannot_be_forgotten(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    run_backup(world, [src])
    records = run_until(world[0], forgetting.tag(ctx_of(world), [1], add=("keep",),
                                                 protect=True))
    assert records[0].protected and records[0].tags == ("keep",)
    with pytest.raises(Exception) as caught:
        run_until(world[0], forgetting.forget(ctx_of(world), Policy(forget=("1",)), False, UTC,
                                              say=lambda text: None))
    assert "protected" in str(caught.value)
    kept, removed, _ = run_until(world[0], forgetting.forget(
        ctx_of(world), Policy(last=1), False, UTC, say=lambda text: None))
    assert (kept, removed) == (2, 0)      # the policy keeps the protected one too


def test_forgetting_every_snapshot_is_refused(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    with pytest.raises(ForgetError, match="no snapshot at all"):
        run_until(world[0], forgetting.forget(ctx_of(world), Policy(forget=("1",)), False, UTC,
                                              say=lambda text: None))


def test_a_mostly_dead_bundle_is_repacked_and_still_restores(world, tmp_path):
    src = str(tmp_path / "src")
    rng = random.Random(9)
    for i in range(40):
        write(os.path.join(src, f"f{i:02}.bin"), rng.randbytes(20000))
    run_backup(world, [src])
    for i in range(36):                                  # 90% of the files go
        os.unlink(os.path.join(src, f"f{i:02}.bin"))
    run_backup(world, [src])
    run_until(world[0], forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                          say=lambda text: None))
    first = prune(world, now=10.0, max_unused=50)
    assert first["repacked_members"] >= 4 and first["repacked_bundles"] >= 1
    prune(world, now=20.0)
    third = prune(world, now=30.0)
    assert third["deleted"] >= 1      # the old bundle died whole once its files moved
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_prune_counts_the_bytes_an_extent_freed(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "big.bin"), random.Random(3).randbytes(3 * 1024 * 1024))
    run_backup(world, [src])
    os.unlink(os.path.join(src, "big.bin"))
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    run_until(world[0], forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                          say=lambda text: None))
    before = stored_bytes(world)
    prune(world, now=1.0)
    second = prune(world, now=2.0)
    freed = before - stored_bytes(world)
    # the extent's eight streams (3 MiB at 4-of-8: 6 MiB) are counted, not just
    # bundles; the nodes freed that less the new map this prune wrote
    assert 6 * 1024 * 1024 <= second["bytes_freed"] <= freed + 64 * 1024
