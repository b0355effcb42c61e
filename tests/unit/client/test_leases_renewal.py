"""A backup renews this owner's lease on every node it knows, at most once
a week (a node trashes an owner it has not heard from for its lease)."""
import os

from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup


def test_a_backup_touches_every_node_once_a_week(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "a.txt"), "wb") as f:
        f.write(b"alpha")
    now = [1_000_000.0]
    monkeypatch.setattr("flud.client.leases.wall_clock", lambda: now[0])
    asked = []
    original = network.call

    def watching(node_id, method, *args, **kwargs):
        if method == "root_get":
            asked.append(node_id)
        return original(node_id, method, *args, **kwargs)
    network.call = watching
    # (every head writer also asks every node for the root: client/chain.py;
    # the renewal itself is what the index records)
    run_backup(world, [src])
    assert set(asked) >= set(network.nodes)          # every node heard from us
    renewed = home.index.get_meta("leases_renewed")
    assert renewed == now[0]
    asked.clear()
    now[0] += 3 * 86400
    run_backup(world, [src])
    assert home.index.get_meta("leases_renewed") == renewed   # not due again within the week
    asked.clear()
    now[0] += 5 * 86400
    run_backup(world, [src])
    assert set(asked) >= set(network.nodes)
    assert home.index.get_meta("leases_renewed") == now[0]
