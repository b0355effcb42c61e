"""`flud check --repair` wired to the holder map, on the in-memory network:
nodes go down one at a time, each time a check re-creates their shares on
others and writes the new holders into the map, and after more losses than
the code survives without repair the snapshot still restores from the key
alone (root record, map, tree: all read from the nodes)."""
import os
import random

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.repair.repository_check import Check
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees


def ctx_of(world):
    clock, home, network = world
    return JobContext(clock, home, network, CPUPool(clock, inline=True),
                      MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                      Progress("check", quiet=True),
                      SegmentCoder(home.config["k"], home.config["n"]), clock.seconds)


def check(world, repair=True):
    return run_until(world[0], Check(ctx_of(world), repair=repair, grace=0.0).run(),
                     limit=2_000_000)


def test_holders_lost_one_at_a_time_are_repaired_and_the_key_alone_restores(tmp_path):
    world = make_world(tmp_path, nodes=16)
    clock, home, network = world
    # 2-of-4: three times n-k is six nodes gone, and ten are left to hold
    # every object's four shares (with 4-of-8, twelve gone would leave four)
    home.config.update(k=2, n=4)
    src = str(tmp_path / "src")
    rng = random.Random(4)
    os.makedirs(os.path.join(src, "docs"))
    for i in range(20):
        with open(os.path.join(src, "docs", f"d{i}.txt"), "wb") as f:
            f.write(rng.randbytes(rng.randint(100, 30000)))
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(rng.randbytes(5 * 1024 * 1024))
    run_backup(world, [src])
    first = check(world, repair=False)
    assert first.counts()["degraded"] == first.counts()["lost"] == 0
    k, n = home.config["k"], home.config["n"]
    stopped, recreated = [], 0
    for _ in range(3 * (n - k)):
        # the node holding the most shares of what is stored goes for good
        counts = {}
        for node_id, node in network.nodes.items():
            if node.up:
                counts[node_id] = len(node.store.keys(network.client_id))
        victim = max(counts, key=counts.get)
        network.nodes[victim].up = False
        network.mark_failed(victim, "gone")   # as a new job's discovery would not find it
        stopped.append(victim)
        report = check(world)
        assert report.counts()["lost"] == 0, report.summary()
        recreated += report.recreated_shares
    # an object is repaired at its second lost share (m = n - 1), so the six
    # nodes gone cost many re-created shares
    assert recreated > 6
    after = check(world, repair=False)
    assert after.counts()["lost"] == 0
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_threshold_of_n_restores_full_redundancy_at_the_first_lost_share(tmp_path):
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(random.Random(7).randbytes(3 * 1024 * 1024))
    run_backup(world, [src])
    counts = {node_id: len(node.store.keys(network.client_id))
              for node_id, node in network.nodes.items()}
    victim = max(counts, key=counts.get)
    network.nodes[victim].up = False
    network.mark_failed(victim, "gone")
    default = check(world)                  # m = n - 1: one lost share is not repaired yet
    assert default.counts()["degraded"] > 0 and default.recreated_shares == 0
    full = run_until(clock, Check(ctx_of(world), repair=True, grace=0.0, m=home.config["n"])
                     .run(), limit=2_000_000)
    assert full.counts()["degraded"] == full.counts()["lost"] == 0
    assert full.recreated_shares == counts[victim] > 0
    assert check(world, repair=False).counts()["degraded"] == 0
