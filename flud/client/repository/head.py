"""The repository's head (docs/snapshots.md): the map index (pages,
snapshots kept, version-1 history) and the root record that points at it.

Every change of the head (a backup's new snapshot, forget, tag, prune's new
map) is the same step: the new records go in a bundle of their own (one tar
per node), then a root record one generation newer names where they are and
that bundle's holders (and the newest snapshot record's, when it lies in an
older bundle). The index keeps a copy of the head (meta REPO_META), so a
backup adds to it without fetching it, and with the root it wrote last, so
no writer moves the head back or forks it (client/repository/head_chain.py): every writer
checks the nodes' root against it before it writes. A home that has none
(new, or made from the exported key) reads the nodes' head but writes only
after `flud adopt`.
"""
import json
import logging

from twisted.internet import defer

from flud.client.repository.bundle_sender import store_blobs
from flud.client.repository.head_chain import (ATTEMPT_META, REPO_META, SAME, SUPERSEDED_META,
                                              ForkedHead, HeadError, Saved, StaleRoot,
                                              judge_home, judge_remembered, refuse_superseded,
                                              superseded_by)
from flud.client.context import wall_clock
from flud.client.repository.holder_map import MAX_PAGES, MapIndex, MapPage, RootRecord
from flud.client.repository.root_store import (ManifestMissing, RootNotStored, RootUnconfirmed,
                                               find_root, holder_set_of, put_root_v2)
from flud.client.repository.prune_books import remember_superseded
from flud.client.records import Bundle, extent_id_or_none
from flud.client.repository.tree_records import BlobRef

log = logging.getLogger("flud.client")

# A writer merges the map's pages when its index would list more than this
# many (every backup appends one; MAX_PAGES is what a reader opens). Read
# at call time: tests lower it.
MERGE_AT = 64
assert MERGE_AT < MAX_PAGES

# What a job refuses with exit 2 and a message (never a traceback).
REFUSALS = (HeadError, RootNotStored, RootUnconfirmed)


class Head:
    """generation: the root's; index: the MapIndex; final: {bundle id:
    Bundle} of the bundles the root names; snapshot: BlobRef of the newest
    snapshot record (None before the first); root: the RootRecord itself
    (None for a head saved before roots were chained); last_id: the highest
    snapshot id issued (0: unknown)."""

    def __init__(self, generation=0, index=None, final=None, snapshot=None, root=None,
                 last_id=0):
        self.generation = generation
        self.index = index if index is not None else MapIndex()
        self.final = dict(final or {})
        self.snapshot = snapshot
        self.root = root
        self.last_id = last_id

    def next_snapshot_id(self, client_index) -> int:
        """The id of the next snapshot: after every id the head has issued
        (the root carries the highest), and every id this home knows."""
        known = [s["id"] for s in client_index.snapshots()]
        return max([self.last_id, *known, 0]) + 1

    @classmethod
    def load(cls, client_index) -> "Head":
        """The head as this home last wrote or read it; an empty one if none."""
        saved = client_index.get_meta(REPO_META)
        if not saved:
            previous = client_index.snapshots()
            return cls(index=MapIndex(v1=tuple(
                {"id": s["id"], "created": s["created"], "manifest": s["manifest_ref"]}
                for s in previous if s.get("manifest_ref"))))
        root = saved.get("root")
        return cls(saved["generation"],
                   MapIndex.decode(json.dumps(saved["index"]).encode()),
                   {bid: Bundle.from_wire(b) for bid, b in saved["final"]},
                   BlobRef(*saved["snapshot"]) if saved["snapshot"] else None,
                   RootRecord.decode(json.dumps(root).encode()) if root else None,
                   saved.get("last_id", 0))

    @classmethod
    def of_repository(cls, repo) -> "Head":
        """The head as the nodes hold it (an open Repository)."""
        root = repo.root
        return cls(root.generation, repo.index, dict(root.bundles), root.snapshot, root,
                   root.last_id)

    def save(self, client_index) -> None:
        client_index.set_meta(REPO_META, {
            "generation": self.generation, "index": json.loads(self.index.encode()),
            "final": [[bid, b.to_wire()] for bid, b in sorted(self.final.items())],
            "snapshot": list(self.snapshot) if self.snapshot else None,
            "root": json.loads(self.root.encode()) if self.root else None,
            "last_id": self.last_id})


def saved_head(client_index):
    """The head this home saved last, or None if it saved none."""
    return Head.load(client_index) if client_index.get_meta(REPO_META) else None


# `check --repair` writes a head (its moves' map page) after hearing one of
# the root's holders, not a majority: its repairs must reach the map while
# most holders are freshly gone (still on the member list), or a restore
# cannot find them (the 20-node churn of issue 25). It never changes which
# snapshots are kept and never deletes. Hearing fewer than a majority, it
# writes a repair root (RootRecord.repairs: same generation, one repair
# more), which never outranks a newer generation another home wrote on the
# holders it could not hear (the lifecycle simulation, seed 70002), and it
# says its view may be stale (docs/snapshots.md, "Root record").
CHECK_LEAST = 1


@defer.inlineCallbacks
def nodes_root(ctx, least=None):
    """The newest root the nodes answer with, or None. A writer hears a
    majority of the root's home set first (manifest.root_holders), else
    RootUnconfirmed and nothing is written: a handover's root is on a
    majority of that set, so two majorities share a node and a writer whose
    home was taken over meets the new writer's root (OTHER_WRITER) even
    when most holders are away and one of the rest replays an old root.
    least: fewer holders are enough (CHECK_LEAST)."""
    try:
        found = yield find_root(ctx.network, ctx.secret, ctx.home.config["n"], least=least)
    except RootUnconfirmed as err:
        raise RootUnconfirmed(f"{err} A writer needs them: a newer head written by "
                              f"another home (after `flud adopt`) may be on the others, "
                              f"and writing over it would fork the repository.",
                              err.best, err.current) from None
    except ManifestMissing:
        return None
    return found


@defer.inlineCallbacks
def heard_root(ctx, least=None):
    """(nodes_root(ctx, least), whether a majority of the root's holders
    answered): with `least`, a majority is asked for first."""
    if least is None:
        found = yield nodes_root(ctx)
        return found, True
    try:
        found = yield nodes_root(ctx)
        return found, True
    except RootUnconfirmed:
        found = yield nodes_root(ctx, least)
        return found, False


@defer.inlineCallbacks
def _check_unmoved(ctx, head: Head, least=None):
    """The nodes' root, checked to be the one `head` came from (read again
    just before a writer replaces it: another home, or this one's stale
    view, must not be written over). Returns (it (None: there is none),
    whether a majority of its holders answered)."""
    found, majority = yield heard_root(ctx, least)
    if _unmoved(head, found, ctx.home.home_id):
        refuse_superseded(ctx.index, head.generation, ctx.home.path)
        return found, majority
    judge_remembered(ctx, head.generation, head.root, found)  # names it
    raise ForkedHead(
        f"the nodes' head changed while this job ran (now generation "
        f"{getattr(found, 'generation', 0)}): nothing was replaced. Run it again.")


def _unmoved(head: Head, found, home_id: str) -> bool:
    if head.root is not None:
        return isinstance(found, RootRecord) and found.digest() == head.root.digest()
    # a head saved before the chain, or none: generations, as before
    if not isinstance(found, RootRecord):
        return head.generation == 0
    return found.generation == head.generation and found.home in ("", home_id)


@defer.inlineCallbacks
def write_head(ctx, small, head: Head, new_index: MapIndex, sealer, newest=None,
               newest_bundle=None, records=(), snapshot_id=None, least=None):
    """Store `records` [(blob id, sealed)] and the sealed new_index in a
    bundle, then a root one generation newer, chained to head's. newest:
    the blob id of the newest snapshot record (one of `records`, or an older
    one whose BlobRef and bundle (id, Bundle) are given as
    newest_bundle=(ref, id, Bundle)); snapshot_id: the id of a new snapshot.
    Refuses (client/repository/head_chain.py) if the nodes' root is not head's. Returns the
    new Head (saved in the client index)."""
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
    new_index = _still_merged(head.index, new_index)
    if new_index.appended() > MERGE_AT or _reduced_pages(ctx, new_index):
        new_index = yield merge_pages(ctx, small, new_index, sealer)
    index_id, index_sealed = sealer.seal(new_index.encode())
    refs, bundles, challenges = yield store_blobs(small, list(records) +
                                                  [(index_id.hex(), index_sealed)])
    final = dict(bundles)
    if newest in refs:
        snapshot_ref = refs[newest]
    else:
        snapshot_ref, bundle_id, bundle = newest_bundle
        final[bundle_id] = bundle
    last_id = max(head.last_id, snapshot_id or 0)
    found, majority = yield _check_unmoved(ctx, head, least)   # again: the stores took a while
    generation, repairs = _next_generation(client_index, head), 0
    holder_set = holder_set_of(ctx.network, ctx.home.config["n"])
    if not majority:
        generation, repairs = _repair_generation(client_index, head, snapshot_id)
        # it heard too few to re-form the set: readers go on needing most
        # of the set the repaired root was written to
        holder_set = head.root.holder_set
    root = RootRecord(snapshot_ref, refs[index_id.hex()], tuple(sorted(final.items())),
                      generation, ctx.home.home_id,
                      found.digest() if isinstance(found, RootRecord) else "", last_id, repairs,
                      holder_set)
    yield _put_root(ctx, root)
    client_index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
    client_index.add_challenges(challenges.items())
    client_index.add_blobs(refs.values())
    new_head = Head(root.generation, new_index, final, snapshot_ref, root, last_id)
    new_head.save(client_index)
    return new_head


def _repair_generation(client_index, head: Head, snapshot_id) -> tuple:
    """(generation, repairs) of a head written by `check --repair` that
    heard fewer than a majority of the root's holders: the same generation,
    one repair more (RootRecord.repairs). What it read may be stale (another
    home may have taken over on the holders it could not hear): its root
    then ranks below that home's newer generation instead of tying with it
    or outranking it, and a reader of this home's own head takes it."""
    if snapshot_id is not None or head.root is None or \
            client_index.get_meta(ATTEMPT_META, 0) > head.generation:
        raise RootUnconfirmed(
            "fewer than a majority of the nodes that hold this home's root record "
            "answered, and this head cannot be written as a repair of the one read "
            "(it adds a snapshot, or a newer root this home sent may be on the others). "
            "Nothing was replaced; run it again when more nodes are up.")
    return head.generation, head.root.repairs + 1


@defer.inlineCallbacks
def put_root_again(ctx, repo):
    """`check --repair`: the same root put again on the nodes that rank
    highest now (its holders leave), only while it is still the nodes'
    newest: put after another writer's, it would bring the head back. Not
    when fewer than a majority of its holders answered: the root read may be
    stale, and a ROOT_PUT replaces whatever a node holds."""
    _, majority = yield _check_unmoved(ctx, Head.of_repository(repo), CHECK_LEAST)
    if majority:
        yield put_root_v2(ctx.network, ctx.secret, ctx.home.config["n"], repo.root)


def _next_generation(client_index, head: Head) -> int:
    """One more than the head's, and than any root this home sent before
    (one that did not reach a majority may come back: it must not tie)."""
    return max(head.generation, client_index.get_meta(ATTEMPT_META, 0)) + 1


def _put_root(ctx, root: RootRecord, everywhere=False):
    ctx.index.set_meta(ATTEMPT_META, root.generation)   # before: a kill mid-put counts too
    return put_root_v2(ctx.network, ctx.secret, ctx.home.config["n"], root, everywhere)


@defer.inlineCallbacks
def merge_pages(ctx, small, new_index: MapIndex, sealer) -> MapIndex:
    """new_index with its pages merged into as few as hold the map (the
    newest row of each object, as a reader would take it), stored: the map
    index never grows past what a reader opens (MAX_PAGES)."""
    from flud.client.repository.reader import Repository

    repo = Repository(ctx)
    superseded = set()
    try:
        yield repo.load_pages(new_index.pages, superseded)
        pages = repo.merged_pages()
    finally:
        repo.close()
    # The older rows go with the merge: the copies only they name are handed
    # to prune's books first, or prune could never find them again.
    remember_superseded(ctx.index, superseded, wall_clock())
    located = []
    for page in pages:
        page_id, sealed = sealer.seal(page.encode())
        refs, bundles, challenges = yield store_blobs(small, [(page_id.hex(), sealed)])
        ref = refs[page_id.hex()]
        ctx.index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
        ctx.index.add_challenges(challenges.items())
        located.append((ref, bundles[ref.bundle]))
    ctx.index.add_blobs(ref for ref, _ in located)
    log.info("map: %d pages merged into %d", len(new_index.pages), len(located))
    return new_index._replace(pages=tuple(located), merged=len(located))


def _reduced_pages(ctx, index: MapIndex) -> bool:
    """A page of the map lies in a bundle on fewer than n distinct nodes
    (coded for fewer, or several shares on one node: a check or backup
    wrote it while most nodes were away) and n nodes are up now. Repair
    cannot give a bundle more shares than it was coded for, so such a page
    stays k + 1 or fewer for good and the head dies with two more lost
    disks (the lifecycle simulation, seed 50003 over a year): the merge
    stores every page again, at full redundancy."""
    n = ctx.home.config["n"]
    return (any(min(bundle.n, len({h.node for h in bundle.holders})) < n
                for _, bundle in index.pages)
            and len(ctx.network.alive_ids()) >= n)


def _still_merged(old: MapIndex, new: MapIndex) -> MapIndex:
    """new, knowing that its first pages are still the old index's merged
    ones (a writer that built it from the old pages need not say so)."""
    if new.merged or not old.merged or new.pages[:old.merged] != old.pages[:old.merged]:
        return new
    return new._replace(merged=old.merged)
