"""A backup names only nodes that stored a share: holders that are down (yet
still listed as alive) or that go down mid-run are failed for the rest of the
run and their shares placed on other live nodes; with fewer live nodes than
n, a bundle's shares go to as many distinct nodes as there are (never fewer
than k) and the summary says its redundancy is reduced; with fewer than k
the run fails with a typed error, never a traceback."""
import os
import random

import pytest

from flud.client.repository.segments import StoreFailed
from flud.client.repository.snapshot_lookup import open_repository
from flud.errors import FludError
from flud.client.repository.root_store import root_holders
from tests.unit.client.fakes import (FakeNetwork, down_once_storing, make_world, run_until,
                                     snapshot_manifest)
from tests.unit.client.test_check_run import ctx_of
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees


def _small_tree(root, rng, count=300):
    for i in range(count):
        folder = os.path.join(root, f"d{i % 7}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i}.txt"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 40_000)))


def _holds(network, node_hex, key_hex) -> bool:
    node = network.nodes[bytes.fromhex(node_hex)]
    try:
        node.store.size(bytes.fromhex(key_hex), network.client_id)
        return True
    except Exception:
        return False


def _unstored(world):
    """(bundle id, share index, node) of every map row whose node does not
    hold that share, over the published map and the client index."""
    clock, home, network = world
    _, repo = run_until(clock, open_repository(ctx_of(world)))
    try:
        bundles = {bid: repo.cache.bundle(bid) for bid in repo.cache.bundle_ids()}
    finally:
        repo.close()
    assert bundles
    return [(bid, h.index, h.node[:8]) for bid, bundle in bundles.items()
            for h in bundle.holders if not _holds(network, h.node, h.key)]


def _restores(world, src, dest):
    restored, _ = run_restore(world, dest, snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, os.path.join(dest, os.path.basename(src))) == []


class DyingNetwork(FakeNetwork):
    """Nodes in `dying` go down after the `after`-th STORE of the run."""

    def __init__(self, clock, nodes, dying=(), after=0):
        super().__init__(clock, nodes=nodes)
        self.dying, self.after, self.stores = list(dying), after, 0

    def call(self, node_id, method, *args, **kwargs):
        if method == "store":
            self.stores += 1
            if self.stores == self.after:
                for node in self.dying:
                    self.nodes[node].up = False
        return super().call(node_id, method, *args, **kwargs)


def _world(tmp_path, nodes, network_class=FakeNetwork, **options):
    clock, home, _ = make_world(tmp_path, nodes=1)
    network = network_class(clock, nodes, **options)
    network.client_id = home.identity.node_id
    return clock, home, network


@pytest.mark.parametrize("stopped", [1, 2, 4])
def test_holders_down_before_the_backup_are_never_named(tmp_path, stopped):
    world = _world(tmp_path, 16)
    network = world[2]
    for node in list(network.nodes)[:stopped]:
        network.nodes[node].up = False      # still listed as alive
    src = str(tmp_path / "src")
    _small_tree(src, random.Random(stopped))
    summary, _, _ = run_backup(world, [src])
    assert summary["skipped"] == 0 and summary["reduced_redundancy"] == 0
    assert _unstored(world) == []
    _restores(world, src, str(tmp_path / "out"))


def test_holders_going_down_mid_run_are_never_named(tmp_path):
    world = _world(tmp_path, 16, DyingNetwork)
    network = world[2]
    network.dying, network.after = list(network.nodes)[3:7], 12
    src = str(tmp_path / "src")
    _small_tree(src, random.Random(9), count=600)
    summary, _, _ = run_backup(world, [src])
    assert network.stores > network.after
    assert summary["skipped"] == 0
    assert _unstored(world) == []
    _restores(world, src, str(tmp_path / "out"))


def test_fewer_live_nodes_than_n_is_reduced_redundancy_not_a_failure(tmp_path):
    world = _world(tmp_path, 8)             # n = 8
    network = world[2]
    for node in list(network.nodes)[:2]:
        network.nodes[node].up = False
    src = str(tmp_path / "src")
    _small_tree(src, random.Random(3), count=60)
    summary, _, _ = run_backup(world, [src])
    assert summary["reduced_redundancy"] > 0
    assert _unstored(world) == []
    _restores(world, src, str(tmp_path / "out"))


def test_fewer_live_nodes_than_k_is_a_typed_error(tmp_path):
    world = _world(tmp_path, 8)             # k = 4
    network = world[2]
    down_once_storing(network, list(network.nodes)[:5])
    src = str(tmp_path / "src")
    _small_tree(src, random.Random(4), count=30)
    with pytest.raises(StoreFailed, match="nodes") as raised:
        run_backup(world, [src])
    assert isinstance(raised.value, FludError)


def test_large_files_with_several_holders_down_before_the_backup(tmp_path):
    """Every node that refuses an extent's stream is failed at once: with
    three or more of an extent's nodes down (6 of 16 here), the next attempt
    goes around them all (one blamed per attempt ran out of attempts)."""
    world = _world(tmp_path, 16)
    network = world[2]
    src = str(tmp_path / "src")
    os.makedirs(src)
    rng = random.Random(8)
    for i in range(4):
        with open(os.path.join(src, f"big{i}.bin"), "wb") as f:
            f.write(rng.randbytes(3 * 1024 * 1024 + i))
    down = list(network.nodes)[:6]
    for node in down:
        network.nodes[node].up = False
    holders = root_holders(network, world[1].config["n"])
    if len(holders) - len(set(holders) & set(down)) < len(holders) // 2 + 1:
        # most of the root's holders are among them (about 1 run in 5): a
        # writer that does not hear a majority of them writes nothing
        with pytest.raises(FludError) as refused:
            run_backup(world, [src])
        assert refused.value.code == "ROOT_UNCONFIRMED"
        return
    summary, _, _ = run_backup(world, [src])
    assert summary["skipped"] == 0
    _restores(world, src, str(tmp_path / "out"))
