"""The repository's head (docs/snapshots.md): the map index (pages,
snapshots kept, version-1 history) and the root record that points at it.

Every change of the head (a backup's new snapshot, forget, tag, prune's new
map) is the same step: the new records go in a bundle of their own (one tar
per node), then a root record one generation newer names where they are and
that bundle's holders (and the newest snapshot record's, when it lies in an
older bundle). The index keeps a copy of the head (meta REPO_META), so a
backup adds to it without fetching it; a home that has none (after a total
loss) reads it from the nodes first.
"""
import json

from twisted.internet import defer

from flud.client.holders import MapIndex, MapPage, RootRecord
from flud.client.manifest import put_root_v2
from flud.client.records import Bundle
from flud.client.tree import BlobRef

REPO_META = "repo_v2"   # the index's copy of the repository head (meta key)


class Head:
    """generation: the root's; index: the MapIndex; final: {bundle id:
    Bundle} of the bundles the root names; snapshot: BlobRef of the newest
    snapshot record (None before the first)."""

    def __init__(self, generation=0, index=None, final=None, snapshot=None):
        self.generation = generation
        self.index = index if index is not None else MapIndex()
        self.final = dict(final or {})
        self.snapshot = snapshot

    @classmethod
    def load(cls, client_index) -> "Head":
        """The head as this home last wrote or read it; an empty one if none."""
        saved = client_index.get_meta(REPO_META)
        if not saved:
            previous = client_index.snapshots()
            return cls(index=MapIndex(v1=tuple(
                {"id": s["id"], "created": s["created"], "manifest": s["manifest_ref"]}
                for s in previous if s.get("manifest_ref"))))
        return cls(saved["generation"],
                   MapIndex.decode(json.dumps(saved["index"]).encode()),
                   {bid: Bundle.from_wire(b) for bid, b in saved["final"]},
                   BlobRef(*saved["snapshot"]) if saved["snapshot"] else None)

    @classmethod
    def of_repository(cls, repo) -> "Head":
        """The head as the nodes hold it (an open Repository)."""
        root = repo.root
        return cls(root.generation, repo.index, dict(root.bundles), root.snapshot)

    def save(self, client_index) -> None:
        client_index.set_meta(REPO_META, {
            "generation": self.generation, "index": json.loads(self.index.encode()),
            "final": [[bid, b.to_wire()] for bid, b in sorted(self.final.items())],
            "snapshot": list(self.snapshot) if self.snapshot else None})


@defer.inlineCallbacks
def store_blobs(small, blobs):
    """Hand blobs [(blob id, sealed)] to a SmallFiles and land them in a
    bundle of their own: (their BlobRefs by id, {bundle id: Bundle}, the
    challenges of those bundles' shares)."""
    for blob_id, sealed in blobs:
        yield small.add_blob(blob_id, sealed)
    yield small.finish()
    bundles, challenges = small.records()
    wanted = {blob_id for blob_id, _ in blobs}
    refs = {ref.blob_id: ref for ref in small.blob_refs if ref.blob_id in wanted}
    small.blob_refs = [ref for ref in small.blob_refs if ref.blob_id not in wanted]
    return refs, bundles, challenges


@defer.inlineCallbacks
def write_head(ctx, small, head: Head, new_index: MapIndex, sealer, newest=None,
               newest_bundle=None, records=()):
    """Store `records` [(blob id, sealed)] and the sealed new_index in a
    bundle, then a root one generation newer. newest: the blob id of the
    newest snapshot record (one of `records`, or an older one whose BlobRef
    and bundle (id, Bundle) are given as newest_bundle=(ref, id, Bundle)).
    Returns the new Head (saved in the client index)."""
    client_index = ctx.index
    others = [(blob_id, sealed) for blob_id, sealed in records if blob_id != newest]
    records = [(blob_id, sealed) for blob_id, sealed in records if blob_id == newest]
    if others:
        # Records that are not the newest snapshot's (tag rewrote older ones)
        # are located by a page of their own, which the new index lists.
        refs, bundles, challenges = yield store_blobs(small, others)
        page = MapPage.of(bundles=bundles, blobs=refs.values())
        page_id, page_sealed = sealer.seal(page.encode())
        page_refs, page_bundles, page_challenges = yield store_blobs(
            small, [(page_id.hex(), page_sealed)])
        page_ref = page_refs[page_id.hex()]
        new_index = new_index._replace(
            pages=new_index.pages + ((page_ref, page_bundles[page_ref.bundle]),))
        for stored, stored_challenges in ((bundles, challenges), (page_bundles, page_challenges)):
            client_index.add_bundles((bid, b.to_wire()) for bid, b in stored.items())
            client_index.add_challenges(stored_challenges.items())
        client_index.add_blobs(list(refs.values()) + [page_ref])
    index_id, index_sealed = sealer.seal(new_index.encode())
    refs, bundles, challenges = yield store_blobs(small, list(records) +
                                                  [(index_id.hex(), index_sealed)])
    final = dict(bundles)
    if newest in refs:
        snapshot_ref = refs[newest]
    else:
        snapshot_ref, bundle_id, bundle = newest_bundle
        final[bundle_id] = bundle
    generation = head.generation + 1
    root = RootRecord(snapshot_ref, refs[index_id.hex()], tuple(sorted(final.items())),
                      generation)
    yield put_root_v2(ctx.network, ctx.secret, ctx.coder.n, root)
    client_index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
    client_index.add_challenges(challenges.items())
    client_index.add_blobs(refs.values())
    new_head = Head(generation, new_index, final, snapshot_ref)
    new_head.save(client_index)
    return new_head


@defer.inlineCallbacks
def adopt_head(ctx):
    """A home that has no head of its own (new, or made after a total loss
    from the key alone) takes the nodes' before it changes anything, with
    the snapshots it lists (so their ids go on and nothing kept is dropped
    from the next index). Returns the Head."""
    from flud.client.manifest import ManifestMissing
    from flud.client.snapshots import open_repository

    client_index = ctx.index
    if client_index.get_meta(REPO_META) or client_index.snapshots():
        return Head.load(client_index)
    try:
        _, repo = yield open_repository(ctx)
    except ManifestMissing:
        return Head.load(client_index)   # nothing on the nodes yet: a first backup
    if repo is None:
        return Head.load(client_index)   # version 1 only: its history stays on the nodes
    try:
        head = Head.of_repository(repo)
        for blob_id, record in (yield repo.snapshots()):
            client_index.add_snapshot(record.snapshot_id, record.time, {
                **record.stats, "format": 2, "record": blob_id, "roots": list(record.paths),
                "tags": list(record.tags), "host": record.host,
                "protected": record.protected}, None)
        for ref, bundle in head.index.pages:
            client_index.add_bundles([(ref.bundle, bundle.to_wire())])
        client_index.add_bundles((bid, b.to_wire()) for bid, b in head.final.items())
        head.save(client_index)
    finally:
        repo.close()
    return head


def record_sender(ctx):
    """A SmallFiles that carries records alone (forget, tag, prune: no file
    data), opened; close() it when done."""
    from flud.client.backup.contents import ContentLog
    from flud.client.backup.small import SmallFiles

    counters = {"bytes_sent": 0, "stores": 0, "tars": 0, "bytes_read": 0}
    summary = {"new": 0, "changed": 0, "unchanged": 0, "skipped": 0, "dedup": 0}
    small = SmallFiles(ctx, ctx.home.config["small_file_limit"], 0, 1, ContentLog(), counters,
                       summary, lambda path, why: None)
    small.open(with_files=False)
    return small
