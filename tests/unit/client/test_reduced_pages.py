"""A map page stored while most nodes were away is coded for fewer than n
nodes (k-of-the-nodes-up), or has several shares on one node. Repair cannot
give a bundle more shares than it was coded for, so such a page can stay at
k + 1 shares or fewer for good, and
two lost disks later the head cannot be read (the lifecycle simulation,
seed 50003 over a year). The next writer that finds n nodes up stores the
map's pages again, at full redundancy."""
import os
import random

from flud.client.repository.head import Head
from flud.client.repository.root_store import root_holders
from tests.unit.client.test_pipeline import run_backup
from tests.unit.client.test_prune import world, write  # noqa: F401 (fixture)


def spread(bundle) -> int:
    """On how many distinct nodes a bundle's shares lie (n when it is whole)."""
    return min(bundle.n, len({holder.node for holder in bundle.holders}))


def pages(world):
    return Head.load(world[1].index).index.pages


def test_pages_stored_at_reduced_redundancy_are_stored_again_when_nodes_are_back(world,
                                                                                tmp_path):
    src = str(tmp_path / "src")
    rng = random.Random(4)
    for i in range(6):
        write(os.path.join(src, f"f{i}.txt"), rng.randbytes(3000))
    run_backup(world, [src])
    network = world[2]
    n = world[1].config["n"]
    # fewer than n nodes up, and still a majority of the root's holders (a
    # writer needs them): every node outside that set and a minority of it
    holders = root_holders(network, n)
    away = [i for i in network.nodes if i not in holders] + holders[:len(holders) // 2 - 1]
    assert len(network.nodes) - len(away) < n
    for node_id in away:
        network.nodes[node_id].up = False
    write(os.path.join(src, "more.txt"), b"written while most nodes are away")
    run_backup(world, [src])
    assert any(spread(bundle) < n for _, bundle in pages(world))   # a reduced page
    for node_id in away:
        network.nodes[node_id].up = True
    network.health.failed.clear()
    write(os.path.join(src, "back.txt"), b"the nodes are back")
    run_backup(world, [src])
    assert [spread(bundle) for _, bundle in pages(world)] == [n] * len(pages(world))
