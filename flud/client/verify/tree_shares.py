"""The shares a version-2 snapshot uses, gathered by walking its tree
directory by directory (repository/tree_walk.py), as prune's reach does:
memory follows one directory and the set of shares, never the snapshot's
files as a whole (docs/snapshots.md).

What a restore reads is in the set too, not only its files: the bundles
holding its directory records, its large files' content records, the map
pages and the head (the snapshot record and the map index). A record that
cannot be read is named by its path in `damaged`: what it holds is not in
the set, and the caller counts it (a verify is never healthier than a
restore).
"""
from twisted.internet import defer

from flud.client.records import Bundle, content_from_wire
from flud.client.repository.share_challenges import IndexChallenges
from flud.client.repository.tree_records import LargeRef, SmallRef
from flud.client.repository.tree_walk import TreeReader
from flud.client.verify.share_set import ShareSet
from flud.errors import FludError

FILE = "f"


@defer.inlineCallbacks
def tree_shares(repo, record_id: str, record, k: int, local_challenges) -> ShareSet:
    """repo: an open Repository; record: the SnapshotRecord (record_id its
    blob id); local_challenges: this home's index (challenges(share key)).
    The challenges are looked up before it returns: the map's cache closes
    with the repository."""
    shares = ShareSet(record.snapshot_id, k)
    records = {record_id}

    def fetch(blob_id):
        records.add(blob_id)
        return repo.fetch_sealed(blob_id)

    def damaged(found):
        shares.damaged.append((found.path, found.why))

    @defer.inlineCallbacks
    def visit(path, entry):
        if entry.kind != FILE or entry.ref is None:
            return
        ref = entry.ref
        if isinstance(ref, SmallRef):
            where = repo.small_range(ref)
            bundle = repo.bundles.get(where.bundle)
            if bundle is None:   # a restore could not fetch it: as unreadable
                shares.damaged.append((path, "its bundle is not in the holder map"))
            else:
                shares.add_bundle(where.bundle, Bundle.from_wire(bundle))
        elif isinstance(ref, LargeRef):
            records.add(ref.content)
            try:
                content = yield repo.large_content(ref)
            except FludError as err:   # BlobDamaged, BadRecord, NewerFormat, a failed fetch
                shares.damaged.append((path, f"cannot be read: {err}"))
                return
            shares.add_large(ref.content, content_from_wire(content))

    yield TreeReader(fetch, repo.sealer).walk(record.tree, visit, damaged)
    for bundle_id, bundle in record_bundles(repo, records).items():
        shares.add_bundle(bundle_id, Bundle.from_wire(bundle))
    shares.resolve_challenges(IndexChallenges(local_challenges, repo.cache))
    shares.unconfirmed = repo.unconfirmed
    return shares


def record_bundles(repo, record_ids) -> dict:
    """{bundle id: record} of the bundles a restore reads before any file:
    the head's (snapshot record, map index), the map pages', and those of
    record_ids (the snapshot's own record, its directories, its large
    files' content records) located by the map. repo: an open Repository."""
    wanted = {repo.root.snapshot.bundle, repo.root.map_index.bundle}
    wanted.update(ref.bundle for ref, _ in repo.index.pages)
    for blob_id in record_ids:
        ref = repo.cache.blob(blob_id)
        if ref is not None:   # one the map cannot place was unreadable, and is counted so
            wanted.add(ref.bundle)
    found = {}
    for bundle_id in sorted(wanted):
        record = repo.bundles.get(bundle_id)
        if record is not None:
            found[bundle_id] = record
    return found
