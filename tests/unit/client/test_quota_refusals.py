"""A node that answers QUOTA (docs/quotas.md) is not failed: it keeps
serving what it holds, nothing new is placed on it this run, the shares
go elsewhere, and a store with nowhere left to go says QUOTA."""
import os
import random

import pytest

from flud.client.repository.segments import StoreFailed
from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup

MIB = 1024 * 1024


def small_and_large(root, seed=1):
    """A few small files (a bundle) and a large one (an extent)."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(5):
        with open(os.path.join(root, f"small-{i}"), "wb") as f:
            f.write(rng.randbytes(3000))
    with open(os.path.join(root, "large"), "wb") as f:
        f.write(rng.randbytes(3 * MIB))


def test_quota_refusals_move_shares_elsewhere_without_failing_the_node(tmp_path):
    world = make_world(tmp_path, 12)
    network = world[2]
    full = list(network.nodes)[:3]
    for node_id in full:
        network.nodes[node_id].quota = 0
    small_and_large(str(tmp_path / "src"))
    summary, _, _ = run_backup(world, [str(tmp_path / "src")])
    assert summary["new"] == 6
    refused = set(network.health.quota)
    assert refused and refused <= set(full)
    assert not network.failed                       # not failed: still asked for what it holds
    assert set(full) <= set(network.alive_ids())
    assert all(network.nodes[node_id].store.stats()["bytes_stored"] == 0 for node_id in full)
    assert not set(network.place(b"x" * 32, 12)) & refused


def test_a_store_with_nowhere_left_fails_naming_quota(tmp_path):
    world = make_world(tmp_path, 10)
    network = world[2]
    for node_id in list(network.nodes)[:5]:
        network.nodes[node_id].quota = 0
    small_and_large(str(tmp_path / "src"), 9)
    with pytest.raises(StoreFailed, match="QUOTA"):
        run_backup(world, [str(tmp_path / "src")])
    assert network.health.quota
    assert not network.failed
