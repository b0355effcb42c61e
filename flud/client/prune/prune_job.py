"""`flud prune`: delete from the nodes what no kept snapshot reaches, by
prune_state's rules (two runs in a row, past the grace period; decided
deletes written down before any DELETE is sent), and the surplus copies
repair left behind (surplus.py), repack bundles that are mostly dead, and
write the map without what is gone.

Order, so that a prune killed at any point loses nothing a kept snapshot
needs: (1) reach and inventory (read only); (2) the plan's state is saved
(what is decided is pending) and this home's index forgets every pending
object (its contents, the file states naming them, its records' blobs):
from here on no backup names them, and one that needs such content stores
it again; the map's blob rows into bundles about to be deleted are
dropped by a page of their own (a head one generation newer), so no reader
follows a row into what is half deleted; (3) DELETEs, each object's
outcome saved as it is known; (4)
repacked members are stored in new bundles and the new map (their new
ranges, without what is gone, without the challenges of shares it no
longer names) becomes the head. A kill after (2) leaves pending deletes
that the next run sends again (a DELETE of what is gone is done) unless a
kept snapshot references them again (a backup stored them again: the
DELETE is cancelled); a kill before (4) leaves the old head, whose map
still lists what was deleted: prune's next run finds those objects absent
and writes the map then; a restore meanwhile never needs them (no kept
snapshot reaches them).
"""
import json
import logging

from twisted.internet import defer

from flud.client.repository.blobs import BlobSealer
from flud.client.context import wall_clock
from flud.client.repository.bundle_sender import record_sender, store_blobs
from flud.client.repository.head import Head, write_head
from flud.client.repository.holder_map import MapIndex, MapPage, PAGE_ROWS
from flud.client.repository.reach import (BUNDLE, EXTENT, Reach, index_extents, inventory,
                                    named_shares, object_id)
from flud.client.prune.repack import point_contents, repack
from flud.client.prune.surplus import is_surplus, superseded, surplus_objects
from flud.client.repository.prune_books import (ABSENT, DEFAULT_GRACE, DELETED, FAILED, STATE_META,
                                     Outcome, PruneState, StoredObject, plan_run,
                                     record_deletes)
from flud.client.records import (Extent, ShareHolder, bundle_block_length, extent_id,
                                 stream_length)
from flud.client.repository.snapshot_lookup import open_repository
from flud.errors import FludError
from flud.protocol.errors import ErrorCode, RemoteError

log = logging.getLogger("flud.client")

DELETES_IN_FLIGHT = 32
DEFAULT_MAX_UNUSED = 50   # percent of a bundle dead before its live members are repacked


class PruneError(FludError):
    code = "PRUNE"


class Prune:
    """ctx: a JobContext. grace: seconds; max_unused: percent; now: the
    wall clock (tests move it)."""

    def __init__(self, ctx, grace=DEFAULT_GRACE, max_unused=DEFAULT_MAX_UNUSED,
                 dry_run=False, now=wall_clock, say=print):
        self.ctx = ctx
        self.grace = grace
        self.max_unused = max_unused
        self.dry_run = dry_run
        self.now = now
        self.say = say
        self._stream_lengths = None   # extent id -> its streams' length, read when first needed
        self._bundle_blocks = None    # bundle id -> its shares' length, read with them
        self._dying = set()           # bundles this run deletes (or retries deleting)
        self._head = None             # the head this run wrote last (None: none yet)
        self.summary = {"objects": 0, "reached": 0, "marked": 0, "waiting": 0, "deleted": 0,
                        "failed": 0, "pending": 0, "shares_deleted": 0, "bytes_freed": 0,
                        "cancelled": 0, "surplus": 0, "surplus_deleted": 0,
                        "repacked_bundles": 0, "repacked_members": 0, "records_read": 0,
                        "snapshots": 0}

    def _state(self) -> PruneState:
        saved = self.ctx.index.get_meta(STATE_META)
        return PruneState.from_wire(saved) if saved else PruneState()

    def _save(self, state: PruneState) -> None:
        self.ctx.index.set_meta(STATE_META, state.to_wire())

    @defer.inlineCallbacks
    def run(self):
        ctx = self.ctx
        _, repo = yield open_repository(ctx)
        if repo is None:
            raise PruneError("the nodes hold no version-2 repository for this key: "
                             "back up once with this flud first")
        try:
            summary = yield self._run(repo)
        finally:
            repo.close()
        return summary

    @defer.inlineCallbacks
    def _run(self, repo):
        s = self.summary
        kept = yield repo.snapshots()
        if len(kept) != len(repo.index.snapshots):
            raise PruneError("a kept snapshot's record cannot be read: nothing is deleted "
                             "while what it reaches is unknown")
        s["snapshots"] = len(kept)
        self.say(f"prune: reading the trees of {len(kept)} snapshot(s)")
        reached = yield Reach(repo, kept, self.ctx).run()
        s["records_read"] = reached.records
        objects, plan = yield self._plan(repo, reached)
        for oid in plan.delete:
            self.say(f"  delete {oid[:2]}{oid[2:18]}  {self._size(objects.get(oid))} bytes")
        dead_share = self._mostly_dead(repo, reached)
        bundle_bytes = sum(b.length for bid in reached.bundles
                           if (b := repo.cache.bundle(bid)) is not None)
        s["live_bytes"] = sum(reached.bundles.values())
        s["reached_bundle_bytes"] = bundle_bytes
        s["live_extent_bytes"] = reached.extent_bytes
        s["mostly_dead_bundles"] = len(dead_share)
        self.say(f"prune: the kept snapshots reach {s['live_bytes']} bytes in bundles (of "
                 f"{bundle_bytes}; {len(dead_share)} bundles more than {self.max_unused}% "
                 f"dead) and {reached.extent_bytes} bytes in extents, before n/k")
        if self.dry_run:
            for bundle_id, live in dead_share:
                self.say(f"  would repack bundle {bundle_id[:16]} ({live} bytes live)")
            return s
        yield self._apply(repo, plan, objects, dead_share)
        return s

    @defer.inlineCallbacks
    def _plan(self, repo, reached):
        """(every object stored, surplus copies included: {id: (kind, name,
        shares)}, this run's RunPlan)."""
        ctx, s = self.ctx, self.summary
        objects = inventory(repo, ctx.index)
        referenced = {object_id(BUNDLE, b) for b in reached.bundles} | \
                     {object_id(EXTENT, x) for x in reached.extents}
        s["objects"], s["reached"] = len(objects), len(referenced & set(objects))
        state = self._state()
        named = named_shares(repo, ctx.index)
        surplus, named_again = surplus_objects((yield superseded(repo, named)), named, state)
        objects.update(surplus)
        s["surplus"] = len(surplus)
        now = self.now()
        plan = plan_run(state, [StoredObject(oid, kind, None)
                                for oid, (kind, _, _) in sorted(objects.items())],
                        referenced | named_again, (), now, self.grace)
        s["marked"], s["waiting"] = len(plan.marked), len(plan.waiting)
        s["cancelled"] = len(plan.revived)
        self.say(f"prune: {len(objects)} objects stored ({len(surplus)} of them surplus "
                 f"copies), {s['reached']} reached by kept snapshots, {len(plan.marked)} newly "
                 f"unreferenced (deleted on a later run past the grace period), "
                 f"{len(plan.delete)} to delete now, {len(plan.revived)} pending deletes "
                 f"cancelled (referenced again)")
        return objects, plan

    @defer.inlineCallbacks
    def _apply(self, repo, plan, objects, dead_share):
        """The plan carried out: state, index, DELETEs, repack, map."""
        ctx, s = self.ctx, self.summary
        self._save(plan.state)                 # decided deletes are pending from here on
        self._dying = {oid[2:] for oid in plan.delete if oid.startswith(BUNDLE + ":")}
        dropped = sorted(ref.blob_id for ref in repo.cache.blob_rows()
                         if ref.bundle in self._dying)
        self._unindex(plan.delete)             # ... and no backup counts on them: both first
        ctx.index.forget_blobs(dropped)        # nor on a record whose map row goes (50020)
        # Repacked files' rows that point into a bundle this run deletes leave
        # the map before its first DELETE, even where a DELETE fails and the
        # bundle stays pending, or the run is killed before its map write: a
        # backup that stores those bytes anew names its own bundle, and a
        # reader must not follow the row to a bundle that is half deleted
        # (seed 50001). A page of dropped rows, not the whole map: a whole
        # map a run kept the 30-day retention bound from holding.
        yield self._drop_rows(repo, dropped)
        outcomes = yield self._delete(plan.delete, objects,
                                      kept_shares(objects, set(plan.delete)))
        state = record_deletes(plan.state, outcomes, self.now())
        self._save(state)
        gone = [oid for oid, o in outcomes.items() if o.status in (DELETED, ABSENT)]
        s["deleted"] = len(gone)
        s["surplus_deleted"] = sum(1 for oid in gone if is_surplus(oid))
        s["failed"] = sum(1 for o in outcomes.values() if o.status == FAILED)
        s["pending"] = len(state.pending)
        bundles_gone = {oid[2:] for oid in gone if oid.startswith(BUNDLE + ":")}
        extents_gone = {oid[2:] for oid in gone if oid.startswith(EXTENT + ":")}
        moved = []
        if dead_share:
            moved = yield repack(ctx, repo, [b for b, _ in dead_share])
            s["repacked_bundles"] = len(dead_share)
            s["repacked_members"] = len(moved)
        if gone or moved or len(repo.index.pages) > 64:
            yield self._write_map(repo, bundles_gone, extents_gone, moved)
        point_contents(ctx.index, moved)         # after the map names the new ranges (95003)
        self.say(f"prune: deleted {s['deleted']} objects ({s['surplus_deleted']} surplus "
                 f"copies; {s['shares_deleted']} shares, {s['bytes_freed']} bytes on the "
                 f"nodes), {s['failed']} failed (kept for a later run), repacked "
                 f"{s['repacked_members']} members of {s['repacked_bundles']} bundles")

    def _unindex(self, ids) -> None:
        """This home's index forgets the objects prune has decided to delete,
        BEFORE any DELETE goes out: a later backup that needs their content
        stores it again instead of naming what may be half gone. Sizes are
        read first (the index is where an extent's length is)."""
        self._share_size(None)
        bundles = {oid[2:] for oid in ids if oid.startswith(BUNDLE + ":")}
        extents = {oid[2:] for oid in ids if oid.startswith(EXTENT + ":")}
        if bundles or extents:
            self.ctx.index.drop_stored(bundles, extents)

    def _size(self, found) -> int:
        """The bytes an object takes on the nodes, as far as the records say
        (0 where this home has no record of it: the nodes' STATS are right)."""
        return 0 if found is None else self._share_size(found) * len(found[2])

    def _share_size(self, found) -> int:
        """The bytes one of the object's shares takes (0 if not known)."""
        if self._stream_lengths is None:   # an extent: each share is a stream
            self._stream_lengths = {extent_id(record): stream_length(Extent.from_wire(record))
                                    for _, record in index_extents(self.ctx.index)}
            self._bundle_blocks = {bid: bundle_block_length(json.loads(record))
                                   for bid, record in self.ctx.index.bundle_rows()}
        if found is None:
            return 0
        kind, name, _ = found
        if kind == BUNDLE:
            return self._bundle_blocks.get(name, 0)
        return self._stream_lengths.get(name, 0)

    def _mostly_dead(self, repo, reached):
        """[(bundle id, live bytes)] of reached bundles more than max_unused
        percent dead (never the head's own bundles)."""
        head_bundles = {bid for bid, _ in repo.root.bundles} | \
                       {ref.bundle for ref, _ in repo.index.pages}
        found = []
        for bundle_id, live in sorted(reached.bundles.items()):
            bundle = repo.cache.bundle(bundle_id)
            if bundle is None or bundle_id in head_bundles or live == 0:
                continue
            if (bundle.length - live) * 100 > self.max_unused * bundle.length:
                found.append((bundle_id, live))
        return found

    @defer.inlineCallbacks
    def _delete(self, ids, objects, kept=frozenset()):
        """DELETE every share of each object, but a (share key, node) that
        `kept` holds (another object, not deleted, names the same stored
        share): {object id: Outcome}."""
        outcomes = {}
        slots = defer.DeferredSemaphore(DELETES_IN_FLIGHT)
        total = len(ids)

        @defer.inlineCallbacks
        def one(oid):
            found = objects.get(oid)
            if found is None:   # pending from an earlier run, gone from every list: done
                outcomes[oid] = Outcome(ABSENT)
                return
            kind, _, shares = found
            errors = []
            for key_hex, node_hex in shares:
                if (key_hex, node_hex) in kept:
                    continue   # the same bytes serve an object that stays: not ours to delete
                try:
                    yield self.ctx.network.delete(bytes.fromhex(node_hex), bytes.fromhex(key_hex))
                    self.summary["shares_deleted"] += 1
                    self.summary["bytes_freed"] += self._share_size(found)
                except RemoteError as err:
                    if err.code != ErrorCode.NOT_FOUND:
                        errors.append(f"{node_hex[:12]}: {err}")
                except Exception as err:   # a node down: the next run tries again
                    errors.append(f"{node_hex[:12]}: {err}")
            outcomes[oid] = Outcome(FAILED, "; ".join(errors[:3])) if errors else \
                Outcome(DELETED)
            done = len(outcomes)
            if done % 100 == 0 or done == total:
                self.say(f"prune: {done}/{total} objects deleted")

        yield defer.DeferredList([slots.run(one, oid) for oid in ids], consumeErrors=True)
        return outcomes

    @defer.inlineCallbacks
    def _drop_rows(self, repo, dropped):
        """A head whose map has one more page: `dropped`, the blob rows that
        point into bundles this run deletes, dropped (MapPage.dropped). No
        kept snapshot reaches those bundles, so no reader needs the rows; the
        map written at the end leaves them out again and this page with them."""
        if not dropped:
            return
        ctx = self.ctx
        sealer = BlobSealer(ctx.secret)
        small = record_sender(ctx)
        try:
            pages = []
            for start in range(0, len(dropped), PAGE_ROWS):
                page = MapPage(dropped=tuple(dropped[start:start + PAGE_ROWS]))
                page_id, sealed = sealer.seal(page.encode())
                refs, page_bundles, _ = yield store_blobs(small, [(page_id.hex(), sealed)])
                ref = refs[page_id.hex()]
                pages.append((ref, page_bundles[ref.bundle]))
            head = Head.of_repository(repo)
            newest = head.snapshot
            self._head = yield write_head(
                ctx, small, head, repo.index._replace(pages=repo.index.pages + tuple(pages)),
                sealer, newest=newest.blob_id,
                newest_bundle=(newest, newest.bundle, head.final.get(newest.bundle)))
        finally:
            small.close()
        # this run's own readers (the map at the end) see them dropped too
        repo.cache.db.executemany("UPDATE blobs SET bundle=NULL WHERE id=?",
                                  ((blob_id,) for blob_id in dropped))

    @defer.inlineCallbacks
    def _write_map(self, repo, bundles_gone, extents_gone, moved):
        """The map without what is gone, with the repacked members' new
        ranges, as new pages; then a new head. Its challenges are those of
        the shares it names (a deleted or superseded share's are dropped)."""
        ctx = self.ctx
        cache = repo.cache
        bundles = {bid: cache.bundle(bid) for bid in cache.bundle_ids()
                   if bid not in bundles_gone}
        extents = {xid: tuple(ShareHolder.from_wire(h) for h in holders)
                   for xid, holders in cache.extent_rows() if xid not in extents_gone}
        blobs = [ref for ref in cache.blob_rows()
                 if ref.bundle not in bundles_gone and ref.bundle not in self._dying]
        moved_ids = {ref.blob_id for ref, _, _ in moved}
        blobs = [ref for ref in blobs if ref.blob_id not in moved_ids]
        for ref, bundle_id, bundle in moved:
            blobs.append(ref)
            bundles[bundle_id] = bundle
        challenges = _named_challenges(ctx.index, cache, bundles, extents, moved)
        pages = MapPage.of(bundles=bundles, extents=extents, blobs=blobs,
                           challenges=challenges).split(PAGE_ROWS)
        sealer = BlobSealer(ctx.secret)
        small = record_sender(ctx)
        try:
            located = []
            for page in pages:
                page_id, sealed = sealer.seal(page.encode())
                refs, page_bundles, _ = yield store_blobs(small, [(page_id.hex(), sealed)])
                ref = refs[page_id.hex()]
                located.append((ref, page_bundles[ref.bundle]))
            head = self._head or Head.of_repository(repo)
            new_index = MapIndex(tuple(located), repo.index.snapshots, repo.index.v1,
                                 merged=len(located))   # whole pages: not merged again
            newest = head.snapshot
            bundle = bundles.get(newest.bundle) or head.final.get(newest.bundle)
            self._head = yield write_head(ctx, small, head, new_index, sealer,
                                          newest=newest.blob_id,
                                          newest_bundle=(newest, newest.bundle, bundle))
        finally:
            small.close()


def kept_shares(objects, deleting) -> set:
    """{(share key, node id hex)} named by an object this run does not
    delete. Share keys are convergent: two extents whose streams of one
    index are the same bytes (a large file changed in part) name one stored
    share, so deleting the dead one's took the live one's share with it
    (seed 70055: an extent's share deleted and stored again by turns, seven
    times in a year, until a restore could not read it)."""
    kept = set()
    for oid, (_, _, shares) in objects.items():
        if oid not in deleting:
            kept.update((key, node) for key, node in shares)
    return kept


def _named_challenges(client_index, cache, bundles, extents, moved) -> list:
    """[(share key, challenges)] for the shares the new map names: the old
    map's rows of those keys, and this home's for the repacked bundles'."""
    keys = {h.key for bundle in bundles.values() for h in bundle.holders}
    keys.update(h.key for holders in extents.values() for h in holders)
    rows = {key: items for key, items in cache.challenge_rows() if key in keys}
    for _, _, bundle in moved:
        for holder in bundle.holders:
            items = client_index.challenges(holder.key)
            if holder.key not in rows and items is not None:
                rows[holder.key] = items
    return sorted(rows.items())
