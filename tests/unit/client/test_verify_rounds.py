"""`flud verify` says which round it ran, and --full reads every byte."""
import random

import blake3
import pytest
from twisted.internet import defer

from flud.client.node_requests import NodeRequests
from flud.client.repository.extents import StreamHashes
from flud.client.repository.segments import CHALLENGE_SPAN, challenges_for
from flud.client.verify.share_set import ShareSet
from flud.client.verify.verify_job import SPOT, WHOLE, challenge_index, describe_round, verify

SECRET = b"s" * 32
NODE = "ab" * 32


class OneShareNetwork(NodeRequests):
    """Answers VERIFY over the bytes it holds (changed ones included)."""

    def __init__(self, data: bytearray):
        self.data = data

    def call(self, node_id, method, key, nonce, offset, length):
        assert method == "verify"
        return defer.succeed(blake3.blake3(nonce + bytes(self.data[offset:offset + length]))
                             .digest())


def synchronous(d):
    out = []
    d.addBoth(out.append)
    assert out, "did not finish"
    return out[0]


@pytest.fixture(params=["share", "stream"])
def share(request):
    """A bundle's share (challenges from its key) or an extent's stream
    (challenges with their nonces, made as its blocks went by)."""
    data = bytearray(random.Random(1).randbytes(5 * CHALLENGE_SPAN + 123))
    key = blake3.blake3(data).digest()
    if request.param == "share":
        challenges = challenges_for(SECRET, key, data)
    else:
        hashes = StreamHashes(SECRET, b"first block key" + bytes([3]), len(data))
        for i in range(0, len(data), 10_000):
            hashes.update(bytes(data[i:i + 10_000]))
        challenges = hashes.challenges()
    bundle = {"len": len(data), "k": 1, "n": 1, "bl": len(data), "shares": [[0, key.hex(), NODE]]}
    manifest = {"contents": {}, "bundles": {"b": bundle},
                "challenges": {key.hex(): challenges}}
    return data, key, challenges, manifest


def corrupt_outside_the_spot(data, challenges):
    offset, span = challenges[SPOT][0], challenges[SPOT][1]
    where = 0 if offset >= 1 else offset + span  # a byte the spot span does not cover
    assert not offset <= where < offset + span
    data[where] ^= 0xFF


def test_rounds_alternate_and_full_is_always_the_whole_share():
    assert challenge_index(0, 2, full=False) == WHOLE
    assert challenge_index(1, 2, full=False) == SPOT
    assert challenge_index(7, 2, full=False) == SPOT
    assert all(challenge_index(r, 2, full=True) == WHOLE for r in range(4))
    assert challenge_index(1, 1, full=False) == WHOLE  # a share with one challenge


def test_the_spot_round_misses_a_corruption_the_full_round_finds(share):
    data, key, challenges, manifest = share
    corrupt_outside_the_spot(data, challenges)
    network = OneShareNetwork(data)

    per_node, bad = synchronous(verify(network, SECRET, ShareSet.of_manifest(manifest), round_number=1))
    assert bad == [] and per_node[NODE]["confirmed"] == 1  # what a spot round cannot see

    per_node, bad = synchronous(verify(network, SECRET, ShareSet.of_manifest(manifest), round_number=1, full=True))
    assert bad == [(NODE, key.hex(), "corrupt")]
    assert per_node[NODE]["corrupt"] == 1


def test_the_description_says_what_was_read():
    spot = describe_round(SPOT)
    assert "spot check" in spot and "64 KiB" in spot and "--full" in spot
    whole = describe_round(WHOLE)
    assert "whole" in whole and "every byte" in whole



def test_the_command_prints_its_round_and_full_finds_what_the_spot_missed(tmp_path, capsys):
    """The command's own output, over an in-memory network: the round is
    named in the heading and the summary; --full leaves the rounds' turn."""
    import argparse
    import os

    from flud.client.backup.backup_job import Backup
    from flud.client.progress import Progress
    from flud.cli.jobs import _verify
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool
    from tests.unit.client.fakes import make_world, run_until

    clock, home, network = make_world(tmp_path, nodes=10)
    os.makedirs(tmp_path / "src")
    (tmp_path / "src" / "big.bin").write_bytes(random.Random(2).randbytes(3 * 1024 * 1024))
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    run_until(clock, Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                            Progress("backup", quiet=True), clock=clock.seconds)
              .run([str(tmp_path / "src")]))

    def run(full):
        args = argparse.Namespace(snapshot=None, sample=1.0, full=full)
        code = run_until(clock, _verify(clock, home, network, None, monitor, None, args))
        return code, capsys.readouterr().out

    code, out = run(full=False)
    assert code == 0 and "whole-share challenge" in out.splitlines()[0], out
    code, out = run(full=False)
    assert code == 0 and "spot check of a 64 KiB span" in out.splitlines()[0], out
    assert "--full" in out.splitlines()[-1], out
    code, out = run(full=True)
    assert code == 0 and "whole-share challenge" in out.splitlines()[0], out
    assert home.index.get_meta("verify_round", 0) == 2  # --full took no turn


# --- what a restore reads is verified too, and what cannot be read is said ----------------


def _backed_up_world(tmp_path, files=None):
    """A world with one backup of a tree of directories (small files, one
    large file), on 10 in-memory nodes."""
    import os

    from tests.unit.client.fakes import make_world
    from tests.unit.client.test_pipeline import run_backup

    world = make_world(tmp_path, nodes=10)
    src = tmp_path / "src"
    for folder in ("a", "a/b", "c"):
        os.makedirs(src / folder, exist_ok=True)
        for i in range(2):
            (src / folder / f"f{i}.txt").write_bytes(f"{folder} {i}\n".encode() * (i + 3))
    (src / "c" / "big.bin").write_bytes(random.Random(3).randbytes(3 * 1024 * 1024))
    run_backup(world, [str(src)])
    return world


def _run_verify(world, full=True):
    import argparse

    from flud.cli.jobs import _verify
    from flud.memory import MemoryMonitor
    from tests.unit.client.fakes import run_until

    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    args = argparse.Namespace(snapshot=None, sample=1.0, full=full)
    code = run_until(clock, _verify(clock, home, network, None, monitor, None, args))
    return code, args.summary


def _open_repo(world):
    """The newest snapshot as the key alone finds it (a snapshots.Found)."""
    from flud.client.context import JobContext
    from flud.client.progress import Progress
    from flud.client.repository.snapshot_lookup import find_snapshot
    from flud.coding import SegmentCoder
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool
    from tests.unit.client.fakes import run_until

    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("read", quiet=True), SegmentCoder(k, n), clock.seconds)
    return run_until(clock, find_snapshot(ctx))


def test_a_snapshot_whose_tree_cannot_be_read_is_not_a_success(tmp_path, monkeypatch):
    """Every record fetched through the map comes back altered: the tree is
    unreadable, so the verify cannot say the snapshot is sound ("0 of 0
    shares confirmed" was exit 0)."""
    from flud.client.repository.reader import Repository

    world = _backed_up_world(tmp_path)
    fetch = Repository.fetch_sealed

    def altered(self, blob_id):
        return fetch(self, blob_id).addCallback(lambda data: bytes([data[0] ^ 1]) + data[1:])
    monkeypatch.setattr(Repository, "fetch_sealed", altered)

    code, summary = _run_verify(world)
    assert code == 2, summary
    assert summary["unreadable"] == 1 and summary["damaged"][0]["path"] == ".", summary


def test_an_unreadable_large_file_record_is_counted_and_the_rest_verified(tmp_path,
                                                                          monkeypatch):
    from flud.client.repository.reader import Repository

    world = _backed_up_world(tmp_path)
    open_blob = Repository.open_blob

    def broken(self, blob_id):   # only large-content records are opened this way
        from flud.client.repository.blobs import BlobDamaged
        return defer.fail(BlobDamaged(f"record {blob_id[:16]} does not match its address"))
    monkeypatch.setattr(Repository, "open_blob", broken)

    code, summary = _run_verify(world)
    assert code == 2, summary
    assert [d["path"] for d in summary["damaged"]] == ["src/c/big.bin"], summary
    assert summary["totals"]["confirmed"] > 0 and not summary["bad"], summary
    monkeypatch.setattr(Repository, "open_blob", open_blob)
    code, summary = _run_verify(world)
    assert code == 0 and summary["unreadable"] == 0, summary


@pytest.mark.parametrize("part", ["snapshot record", "map index", "map page", "root directory",
                                  "large-file record"])
def test_the_bundles_a_restore_reads_first_are_challenged(tmp_path, part):
    """One share of the bundle holding each record a restore reads before
    any file goes missing: verify finds it (it challenged only the files'
    shares, and said all was well)."""
    from flud.client.records import Bundle
    from flud.client.repository.tree_records import LargeRef
    from flud.client.repository.tree_walk import TreeReader
    from tests.unit.client.fakes import run_until

    world = _backed_up_world(tmp_path)
    clock, home, network = world
    found = _open_repo(world)
    try:
        repo = found.repo
        if part == "snapshot record":
            bundle_id = repo.root.snapshot.bundle
        elif part == "map index":
            bundle_id = repo.root.map_index.bundle
        elif part == "map page":
            bundle_id = repo.index.pages[-1][0].bundle
        elif part == "root directory":
            bundle_id = repo.cache.blob(found.record.tree).bundle
        else:
            reader = TreeReader(repo.fetch_sealed, repo.sealer)
            records = []

            def visit(path, entry):
                if isinstance(entry.ref, LargeRef):
                    records.append(entry.ref.content)
            run_until(clock, reader.walk(found.record.tree, visit, lambda d: None))
            bundle_id = repo.cache.blob(records[0]).bundle
        holder = Bundle.holders_from_wire(repo.bundles[bundle_id])[0]
    finally:
        found.close()
    network.nodes[bytes.fromhex(holder.node)].delete(network.client_id,
                                                     bytes.fromhex(holder.key))

    code, summary = _run_verify(world)
    assert code == 1, summary
    assert summary["bad"] == [{"node": holder.node, "share": holder.key, "what": "missing"}]


class RetrieveNetwork(OneShareNetwork):
    """Answers RETRIEVE too (a share with no recorded challenge is fetched)."""

    def call(self, node_id, method, *args):
        if method == "retrieve":
            return defer.succeed(bytes(self.data))
        return super().call(node_id, method, *args)


def test_a_bundle_share_without_challenges_is_fetched_and_checked(share):
    """A home made from the key alone has no challenges for the map's own
    bundles: their shares are fetched whole and checked against their key
    (they were skipped without a word)."""
    data, key, challenges, manifest = share
    manifest["challenges"] = {}
    network = RetrieveNetwork(data)
    per_node, bad = synchronous(verify(network, SECRET, ShareSet.of_manifest(manifest), round_number=0))
    assert bad == [] and per_node[NODE]["confirmed"] == 1
    data[7] ^= 1
    per_node, bad = synchronous(verify(network, SECRET, ShareSet.of_manifest(manifest), round_number=0))
    assert bad == [(NODE, key.hex(), "corrupt")]


def test_an_extent_share_without_challenges_is_counted_unchallenged():
    """An extent's stream may be far larger than a bundle's share: without
    a recorded challenge it is not fetched, but counted as unchecked."""
    data = bytearray(random.Random(4).randbytes(1000))
    key = blake3.blake3(data).digest()
    from flud.client.records import Extent, LargeContent, ShareHolder
    shares = ShareSet(1, 1, challenges={})
    shares.add_large("c", LargeContent(len(data), extents=(
        Extent((ShareHolder(0, key.hex(), NODE),), ()),)))
    per_node, bad = synchronous(verify(RetrieveNetwork(data), SECRET, shares, round_number=0))
    assert bad == [(NODE, key.hex(), "unchallenged")]
    assert per_node[NODE]["unchallenged"] == 1 and per_node[NODE]["confirmed"] == 0


def test_an_object_with_fewer_than_k_shares_left_is_not_restorable_and_says_so(tmp_path):
    """n-k+1 shares of one bundle gone: a restore of the snapshot fails, so
    verify may not exit 1 ("problem found") as for one missing share."""
    from flud.client.records import Bundle
    from tests.unit.client.fakes import snapshot_manifest

    world = _backed_up_world(tmp_path)
    clock, home, network = world
    manifest = snapshot_manifest(world)
    small = sorted(manifest["bundles"])   # the small files' bundles
    bundle = Bundle.from_wire(manifest["bundles"][small[0]])
    for holder in bundle.holders[:bundle.n - bundle.k + 1]:
        network.nodes[bytes.fromhex(holder.node)].delete(network.client_id,
                                                         bytes.fromhex(holder.key))

    code, summary = _run_verify(world)
    assert code == 2 and summary["short_of_k"] == 1 and summary["unreadable"] == 0, summary
    assert summary["totals"]["missing"] == bundle.n - bundle.k + 1, summary
