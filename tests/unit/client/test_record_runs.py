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
from flud.client.repository import tree_walk
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


def _deep_tree(root, rng):
    """24 directories of 5 directories, a file in each: walking the first
    of the 24, its 23 siblings are held ahead."""
    for a in range(24):
        for b in range(5):
            sub = os.path.join(root, f"a{a:02}", f"b{b}")
            os.makedirs(sub)
            with open(os.path.join(sub, "f"), "wb") as out:
                out.write(rng.randbytes(rng.randrange(10, 300)))


def _walk(world, batched, damage=None, weighed=False, prefetch=32):
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
        reader = TreeReader(repo.fetch_sealed, repo.sealer, prefetch=prefetch,
                            fetch_many=repo.fetch_sealed_many if batched else None,
                            weigh=repo.sealed_size if weighed else None)
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


def test_a_deep_tree_is_read_in_fewer_retrieves_when_weighed(tmp_path, monkeypatch):
    """Bounded by records (16), a walk's unvisited siblings take the slots
    and a directory's subdirectories are asked one at a time;
    bounded by bytes (the map gives each record's length), they are asked
    together and share RETRIEVEs, and what is held ahead stays in bound."""
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    _deep_tree(src, random.Random(7))
    run_backup(world, [src])
    alone_paths, alone = _walk(world, batched=False, prefetch=16)
    counted_paths, counted = _walk(world, batched=True, prefetch=16)
    held = []
    drop = TreeReader._drop

    def watched(self, blob_id):
        held.append(self._ahead_bytes)
        return drop(self, blob_id)
    monkeypatch.setattr(TreeReader, "_drop", watched)
    paths, weighed = _walk(world, batched=True, weighed=True)
    assert paths == counted_paths == alone_paths and len(paths) == 24 + 120 * 2 + 1
    assert alone >= 24 + 120 + 1
    assert 4 * weighed <= 3 * counted and 2 * counted <= alone, (weighed, counted, alone)
    assert held and max(held) <= tree_walk.PREFETCH_BYTES
