"""The home's record cache (client/repository/record_cache.py) and the
walk's fetch-ahead (client/repository/tree_walk.py), issue 27: a reader of
the home that wrote a backup walks its tree without fetching a record; the
cache is bounded, versioned, and a damaged one costs fetches, never a wrong
tree."""
import os
import random
import sqlite3

from twisted.internet import defer

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.repository.record_cache import FILE_NAME, RecordCache
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.client.repository.tree_walk import TreeReader
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_pipeline import make_tree, run_backup


def _walk(world, cached, damage=None):
    """(paths the newest snapshot's tree holds, record fetches from the
    nodes while walking it)."""
    clock, home, network = world
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("ls", quiet=True), SegmentCoder(home.config["k"],
                                                              home.config["n"]), clock.seconds)
    found = run_until(clock, find_snapshot(ctx, cached=cached))
    try:
        if damage:
            damage(found.repo)
        before = network.calls.get("retrieve", 0) + network.calls.get("retrieve_range", 0)
        paths = []
        reader = TreeReader(found.repo.fetch_sealed, found.repo.sealer)
        run_until(clock, reader.walk(found.record.tree, lambda p, e: paths.append(p),
                                     lambda d: paths.append(("damaged", d))))
        after = network.calls.get("retrieve", 0) + network.calls.get("retrieve_range", 0)
        return sorted(map(str, paths)), after - before
    finally:
        found.close()


def test_the_home_that_wrote_a_backup_walks_its_tree_without_the_network(tmp_path):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    make_tree(src, random.Random(3))
    run_backup(world, [src])
    cold_paths, _ = _walk(world, cached=False)
    paths, fetched = _walk(world, cached=True)
    assert paths == cold_paths and len(paths) > 40
    assert fetched == 0
    # another home (the key alone, an empty cache) fetches, and caches
    os.unlink(os.path.join(world[1].path, FILE_NAME))
    again, fetched = _walk(world, cached=True)
    assert again == paths and fetched > 0
    third, fetched = _walk(world, cached=True)
    assert third == paths and fetched == 0


def test_a_damaged_cached_record_is_fetched_again_not_believed(tmp_path):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    make_tree(src, random.Random(4))
    run_backup(world, [src])
    good, _ = _walk(world, cached=False)
    db = sqlite3.connect(os.path.join(world[1].path, FILE_NAME))
    db.execute("UPDATE blobs SET sealed = X'00' || substr(sealed, 2)")
    db.commit()
    db.close()
    paths, fetched = _walk(world, cached=True)
    assert paths == good and fetched > 0


def test_the_cache_is_bounded_and_versioned(tmp_path):
    cache = RecordCache(str(tmp_path), max_bytes=100_000)
    for i in range(100):
        cache.put(f"{i:064x}", os.urandom(10_000))
    total = cache._db.execute("SELECT SUM(LENGTH(sealed)) FROM blobs").fetchone()[0]
    assert total <= 100_000
    assert cache.get(f"{99:064x}") is not None and cache.get(f"{0:064x}") is None
    cache._db.execute("UPDATE meta SET value = 99 WHERE key = 'version'")
    cache.close()
    newer = RecordCache(str(tmp_path))   # a version it does not know: afresh, kept aside
    assert newer.get(f"{99:064x}") is None
    newer.put("ab" * 32, b"x")
    assert newer.get("ab" * 32) == b"x"
    assert os.path.exists(os.path.join(str(tmp_path), FILE_NAME + ".old"))
    newer.close()
    with open(os.path.join(str(tmp_path), FILE_NAME), "wb") as f:
        f.write(b"not sqlite at all" * 100)
    broken = RecordCache(str(tmp_path))
    broken.put("cd" * 32, b"y")
    assert broken.get("cd" * 32) == b"y"
    broken.close()


def test_the_walk_fetches_subdirectories_ahead_within_its_bound():
    """Records asked for at once, at most `prefetch` ahead; a failed one is
    reported where the walk reaches it."""
    from flud.client.repository.blobs import BlobSealer
    from flud.client.repository.entry_meta import EMPTY_META
    from flud.client.repository.reader import BlobMissing
    from flud.client.repository.tree_records import DIRECTORY, DirEntry, directory_records
    sealer = BlobSealer(b"k" * 32)
    blobs = {}

    def put(entries):
        first, *rest = directory_records(entries)
        assert not rest
        blob_id, sealed = sealer.seal(first.encode())
        blobs[blob_id.hex()] = sealed
        return blob_id.hex()

    leaves = [put([DirEntry(f"f{i}", "f", 0o644, 0, 0, None, EMPTY_META)]) for i in range(40)]
    root = put([DirEntry(f"d{i:02}", DIRECTORY, 0o755, 0, 0, ref, EMPTY_META)
                for i, ref in enumerate(leaves)])
    pending, most = {}, [0]
    bad = leaves[7]

    def fetch(blob_id):
        d = defer.Deferred()
        pending[blob_id] = d
        most[0] = max(most[0], len(pending))
        return d

    reader = TreeReader(fetch, sealer, prefetch=8)
    seen, damaged = [], []
    walk = reader.walk(root, lambda p, e: seen.append(p), damaged.append)
    while pending:
        blob_id, d = next(iter(pending.items()))
        del pending[blob_id]
        if blob_id == bad:
            d.errback(BlobMissing("gone"))
        else:
            d.callback(blobs[blob_id])
    assert walk.called
    assert 2 <= most[0] <= 9    # the walk's own fetch and 8 ahead
    assert [d.path for d in damaged] == ["d07"]
    assert len([p for p in seen if "/" in p]) == 39
