"""`flud adopt` keeps in the rebuilt index only what the head's kept
snapshots reach. Another home's prune may have begun deleting an object
that the map still lists (its DELETE failed on a holder that was away: the
object stays listed until every share is gone, and the pending delete is
in that home's books, not on the nodes). The adopting home's old index
still names it; deduplicating against it names a half-deleted object."""
import os
import random

from flud.client.repository.head_adopt import adopt
from flud.client.prune import forget as forgetting
from flud.client.prune.retention import Policy
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_head_chain import _second_home
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import UTC, ctx_of, prune, world, write  # noqa: F401
from tools.treecmp import compare_trees

BIG = random.Random(9).randbytes(2 * 1024 * 1024)


def test_adopting_back_forgets_what_the_other_home_is_still_deleting(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "big.bin"), BIG)
    run_backup(world, [src])
    (_, record), = world[1].index.extent_rows()
    world_b = _second_home(world, tmp_path)
    ctx_b = ctx_of(world_b)
    run_until(world[0], adopt(ctx_b))
    os.unlink(os.path.join(src, "big.bin"))
    write(os.path.join(src, "small.txt"), b"small")
    run_backup(world_b, [src])
    run_until(world[0], forgetting.forget(ctx_b, Policy(last=1), False, UTC,
                                          say=lambda text: None))
    prune(world_b, now=1000.0)
    network = world[2]
    away = network.nodes[bytes.fromhex(record["shares"][0][2])]
    away.up = False                       # one DELETE fails: the extent stays listed
    assert prune(world_b, now=2000.0)["failed"] >= 1
    away.up = True
    # a takes over again and backs the same bytes up: it must store them anew
    run_until(world[0], adopt(ctx_of(world)))
    write(os.path.join(src, "big.bin"), BIG)
    run_backup(world, [src])
    out = str(tmp_path / "out")
    restored, job = run_restore(world, out, snapshot_manifest(world))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(out, "src")) == []
