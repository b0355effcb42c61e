"""Taking the nodes' head as this home's (docs/snapshots.md): before a
backup, the home's own next head the nodes hold (adopt_head); `flud adopt`,
this home becoming the writer of the nodes' head (adopt); both through
take_head, which lists the head's snapshots in the index. Above head.py:
they open the repository (snapshot_lookup) and walk what it reaches, which
the head's writers never need."""
from twisted.internet import defer

from flud.client.records import extent_id_or_none
from flud.client.repository.head import Head, _next_generation, _put_root, nodes_root, saved_head
from flud.client.repository.head_chain import (REPO_META, SAME, SUPERSEDED_META, HeadError,
                                              Saved, StaleRoot, judge_home, superseded_by)
from flud.client.repository.holder_map import RootRecord
from flud.client.repository.root_store import ManifestMissing, RootUnconfirmed, holder_set_of


@defer.inlineCallbacks
def adopt_head(ctx):
    """Before a backup: this home's head, checked against the nodes' root
    (client/repository/head_chain.py: refused if the nodes' is stale, forked, or another
    home's). Where the nodes hold this home's own next head (it was killed
    before saving it, or lost its index but kept its id) that is taken, with
    the snapshots it lists, so their ids go on and nothing kept is dropped
    from the next index. Returns the Head."""
    from flud.client.repository.snapshot_lookup import open_repository

    client_index = ctx.index
    found = yield nodes_root(ctx)
    if judge_home(ctx, found) == SAME or not isinstance(found, RootRecord) \
            or Saved(client_index).legacy:
        return Head.load(client_index)   # (a version-1 home's history is its index, as before)
    saved = saved_head(client_index)
    if saved is not None and saved.root is None and found.generation == saved.generation:
        return Head.load(client_index)   # saved before the chain: the same generation
    # this home's own next head (AHEAD), or a newer one saved before the chain: take it
    _, repo = yield open_repository(ctx, root=found)
    try:
        head = yield take_head(ctx, repo)
    finally:
        repo.close()
    return head


@defer.inlineCallbacks
def take_head(ctx, repo, rebuild=False):
    """Make the nodes' head (an open Repository) this home's: its snapshots
    listed in the index (and those it does not list dropped), its pages'
    bundles known. rebuild: also forget every bundle and extent the map
    does not hold (another home's prune may have deleted them: nothing may
    deduplicate against them). Returns the Head, saved."""
    client_index = ctx.index
    head = Head.of_repository(repo)
    records = yield repo.snapshots()
    listed = {record.snapshot_id for _, record in records} | {
        entry.get("id") for entry in head.index.v1 if type(entry.get("id")) is int}
    # ids this home gave (a head it wrote that the nodes lost) are not given again
    issued = Head.load(client_index).next_snapshot_id(client_index) - 1
    client_index.remove_snapshots([s["id"] for s in client_index.snapshots()
                                   if s["id"] not in listed])
    for blob_id, record in records:
        client_index.add_snapshot(record.snapshot_id, record.time, {
            **record.stats, "format": 2, "record": blob_id, "roots": list(record.paths),
            "tags": list(record.tags), "host": record.host,
            "protected": record.protected}, None)
    if rebuild:
        yield _forget_unreached(ctx, repo, records)
    for ref, bundle in head.index.pages:
        client_index.add_bundles([(ref.bundle, bundle.to_wire())])
    client_index.add_bundles((bid, b.to_wire()) for bid, b in head.final.items())
    head.last_id = max([head.last_id, issued, *listed])
    head.save(client_index)
    return head


@defer.inlineCallbacks
def _forget_unreached(ctx, repo, records):
    """Drop from the index every bundle and extent the head's kept snapshots
    do not reach (with the contents stored in them and the file states
    naming those): the next backup reads those files again instead of
    naming lost objects. Not merely what the map lists: another home's
    prune may be deleting an object the map still lists (a DELETE failed on
    a holder that was away; its pending deletes are in its own books), and
    what no kept snapshot reaches is what such a prune deletes. If a kept
    record cannot be read now, nothing stored is kept (safe: stored anew).
    Returns how many contents were dropped."""
    from flud.client.repository.reach import Reach, RecordUnreadable

    client_index = ctx.index
    try:
        reached = yield Reach(repo, records, ctx).run()
        bundles_kept, extents_kept = set(reached.bundles), set(reached.extents)
    except RecordUnreadable:
        bundles_kept, extents_kept = set(), set()
    bundles = [bid for bid, _ in client_index.bundle_rows() if bid not in bundles_kept]
    extents = [xid for xid in (extent_id_or_none(r) for _, r in client_index.extent_rows())
               if xid is not None and xid not in extents_kept]
    return client_index.drop_stored(bundles, extents)


@defer.inlineCallbacks
def adopt(ctx, accept_older=False):
    """`flud adopt`: this home becomes the writer of the nodes' head. Its
    index is rebuilt from the map (snapshots, and nothing the map does not
    hold), and a root one generation newer, naming this home, is put at
    once: the home that wrote before is refused from then on. A head older
    than this home's own is taken only with accept_older (its newest's
    holders are gone for good); with nothing on the nodes at all, that
    starts a new repository. Returns (the Head, the home id that wrote
    before or "")."""
    from flud.client.repository.snapshot_lookup import open_repository

    ctx.index.recover_run()   # a killed backup's rows settle before the index is rebuilt
    try:
        found = yield nodes_root(ctx)
    except RootUnconfirmed as err:
        # most of the set the newest root was written to is gone for good
        # (lost disks): only the user can say so, and take what the set as
        # it is now holds
        if not (accept_older and err.current):
            raise
        found = err.best
    try:
        judge_home(ctx, found)
    except StaleRoot:
        if not accept_older:
            raise
    except HeadError:
        pass   # forked, or another home's: what adopting resolves
    other = superseded_by(ctx.index)
    if other and not accept_older and (not isinstance(found, RootRecord)
                                       or found.generation < other["generation"]):
        raise StaleRoot(
            f"the newest root the nodes answered with is older than the one home "
            f"{other['home'][:8]} wrote (generation {other['generation']}), which this "
            f"home met before: the nodes holding it are away, or one answered with an old "
            f"root. Nothing was changed. Run it again when more nodes are up; if those "
            f"nodes are gone for good, `--accept-older` takes what the nodes hold.")
    if found is None:
        if not accept_older:
            raise ManifestMissing("no node holds a root record for this key: nothing to "
                                  "adopt (the first backup makes one)")
        return _start_over(ctx.index), ""
    if not isinstance(found, RootRecord):
        raise HeadError("the nodes hold only a version-1 repository for this key: back it "
                        "up once with this flud (nothing to adopt)")
    _, repo = yield open_repository(ctx, root=found)
    try:
        head = yield take_head(ctx, repo, rebuild=True)
    finally:
        repo.close()
    root = found.successor(ctx.home.home_id, last_id=head.last_id,
                           generation=_next_generation(ctx.index, head),
                           holder_set=holder_set_of(ctx.network, ctx.home.config["n"]))
    yield _put_root(ctx, root, everywhere=True)   # a handover: every holder, see root_holders
    head.root, head.generation = root, root.generation
    head.save(ctx.index)
    ctx.index.set_meta(SUPERSEDED_META, None)   # this home is the writer now
    return head, found.home if found.home != ctx.home.home_id else ""


def _start_over(client_index) -> Head:
    """No root anywhere and the user said the old head is gone: forget it
    and everything stored under it; the next backup begins a repository."""
    client_index.drop_stored([bid for bid, _ in client_index.bundle_rows()],
                             [xid for xid in (extent_id_or_none(r)
                                              for _, r in client_index.extent_rows())
                              if xid is not None])
    client_index.remove_snapshots([s["id"] for s in client_index.snapshots()])
    client_index.set_meta(REPO_META, None)
    client_index.set_meta(SUPERSEDED_META, None)
    return Head()
