"""A large file's segments whose primary holder failed before the restore
reached them are fetched whole, from other holders, at once: not block by
block first (a request of a node known failed, then the segment fetched
again whole), and not one at a time through the repair turn. A stalled
holder fails in the job's first random walk, so every segment it held a
primary of went that way: test_faults' stalled-before restore ran up to
3x its all-up time on a busy machine."""
import os
import random
from collections import Counter

from tests.unit.client.fakes import make_world, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees

MIB = 1024 * 1024


def counting_retrieves(network) -> Counter:
    asked = Counter()
    call = network.call

    def counted(node_id, method, *args, **kwargs):
        if method == "retrieve":
            asked[node_id] += 1
        return call(node_id, method, *args, **kwargs)
    network.call = counted
    return asked


def test_a_holder_failed_before_the_restore_is_not_asked_and_costs_no_refetch(tmp_path):
    world = make_world(tmp_path, 10)
    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(random.Random(3).randbytes(8 * MIB + 5))
    summary, _, _ = run_backup(world, [src])
    manifest = snapshot_manifest(world, summary["snapshot"])
    asked = counting_retrieves(network)
    started = clock.seconds()
    run_restore(world, str(tmp_path / "all-up"), manifest)
    all_up, all_up_time = sum(asked.values()), clock.seconds() - started

    big = next(r for r in manifest["contents"].values() if r["t"] == "L")
    primary = bytes.fromhex(next(node for index, _, node in big["ext"][0]["shares"]
                                 if index == 0))
    network.nodes[primary].up = False
    network.mark_failed(primary, "stalled in the first random walk")
    asked.clear()
    started = clock.seconds()
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
    assert asked[primary] == 0, "a node failed before the restore was asked for blocks"
    assert sum(asked.values()) == all_up      # k shares a segment, as with every node up
    assert clock.seconds() - started < 2 * all_up_time
