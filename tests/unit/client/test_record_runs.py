"""Several directory records in one RETRIEVE (client/repository/record_runs.py,
issue 27): a tree read without the record cache asks for the records it
fetches ahead at once, and those close together in a bundle block come in
one ranged RETRIEVE, cut and checked one by one; a damaged one is rebuilt
from other shares and the rest are unharmed."""
import os
import random

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.client.repository.tree_walk import TreeReader
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_pipeline import run_backup


def _wide_tree(root, rng, dirs=24):
    """A directory of `dirs` subdirectories with a few small files each:
    every listing fetches many records ahead at once."""
    for d in range(dirs):
        sub = os.path.join(root, f"d{d:02}")
        os.makedirs(sub)
        for f in range(3):
            with open(os.path.join(sub, f"f{f}"), "wb") as out:
                out.write(rng.randbytes(rng.randrange(10, 2000)))


def _walk(world, batched, damage=None):
    """(paths the snapshot's tree holds, RETRIEVEs of the walk)."""
    clock, home, network = world
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("ls", quiet=True), SegmentCoder(home.config["k"],
                                                              home.config["n"]), clock.seconds)
    found = run_until(clock, find_snapshot(ctx, cached=False))
    try:
        repo = found.repo
        if damage is not None:
            damage(repo)
        before = network.calls.get("retrieve", 0)
        paths = []
        reader = TreeReader(repo.fetch_sealed, repo.sealer, prefetch=32,
                            fetch_many=repo.fetch_sealed_many if batched else None)
        run_until(clock, reader.walk(found.record.tree, lambda p, e: paths.append(p),
                                     lambda d: paths.append(("damaged", d))))
        return sorted(map(str, paths)), network.calls.get("retrieve", 0) - before
    finally:
        found.close()


def test_records_fetched_ahead_share_retrieves(tmp_path):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    _wide_tree(src, random.Random(5))
    run_backup(world, [src])
    alone_paths, alone = _walk(world, batched=False)
    paths, batched = _walk(world, batched=True)
    assert paths == alone_paths and len(paths) == 24 * 4 + 1
    # one RETRIEVE a record before; now the 24 subdirectories' records come
    # in runs (as many as the blocks they lie in)
    assert alone >= 25
    assert 2 * batched <= alone, (batched, alone)


def test_a_damaged_record_in_a_run_is_rebuilt_and_the_others_kept(tmp_path):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    _wide_tree(src, random.Random(6))
    run_backup(world, [src])
    clean, clean_retrieves = _walk(world, batched=True)
    hit = []

    def damage(repo):
        """The first run of several records comes back with a byte flipped
        in the middle (one record of it damaged, as by a bad share)."""
        ranges = repo._fetch
        retrieve_run = ranges.retrieve_run

        def flipped(run):
            def flip(data):
                data = bytearray(data)
                if not hit:
                    hit.append(len(data))
                    data[len(data) // 2] ^= 1
                return bytes(data)
            return retrieve_run(run).addCallback(flip)
        ranges.retrieve_run = flipped

    paths, retrieves = _walk(world, batched=True, damage=damage)
    assert hit, "no run of several records was fetched"
    assert paths == clean   # nothing lost: the damaged record came from other shares
    assert retrieves >= clean_retrieves + 4   # k of them, for that record alone
