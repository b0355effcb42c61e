"""`flud check [--repair]` on a version-2 repository: the holder map's
bundles and extents are the objects (repair/repair_plan.py), the check job
challenges, classifies and re-creates (repair/check_job.py), and what it moved
becomes a map page in a new head, so a restore (also one from the key
alone) reads the new holders. The check state (rotation, what was seen of
each share, moves not yet in the map) is kept in the client index between
runs: an interrupted repair resumes, and what it stored is not stored again.

With fewer reachable nodes than n, repair raises every object as far as
the nodes allow (one share per node) and the map page that records it is
a bundle of k-of-(reachable nodes): a repair is never lost for want of
the n nodes a backup needs. What moved is written into every local copy
of it too (ClientIndex.repaired). Objects prune is deleting (its pending
deletes) are left out of the counts: they are going on purpose.
"""
from twisted.internet import defer

from flud.client.repository.blobs import BlobSealer
from flud.client.context import JobContext
from flud.client.repository.bundle_sender import record_sender, store_blobs
from flud.client.repository.head import CHECK_LEAST, Head, put_root_again, write_head
from flud.client.repository.holder_map import HolderMap, MapPage
from flud.client.repository.prune_books import deleted_copies, pending_object_ids
from flud.client.records import Extent, ShareHolder, stream_length
from flud.client.repair.object_health import DEFAULT_GRACE, SAFETY_MARGIN, RepairPolicy
from flud.client.budget_plan import plan_budget, repair_working_bytes
from flud.client.repair.check_job import REPAIR_IN_FLIGHT, CheckJob
from flud.client.repair.stream_repair import CHUNK as STREAM_CHUNK
from flud.client.repair.repair_plan import map_page, objects_from_map
from flud.client.repair.probes import probe_of
from flud.client.repair.rotation import WEEK
from flud.client.repair.check_state import CheckState
from flud.client.repository.snapshot_lookup import open_repository
from flud.client.repository.share_challenges import IndexChallenges
from flud.coding import SegmentCoder
from flud.errors import FludError

STATE_META = "check_state"


class CheckError(FludError):
    code = "CHECK"


def _holder_map(cache) -> HolderMap:
    bundles = {bid: cache.bundle(bid) for bid in cache.bundle_ids()}
    extents = {xid: tuple(ShareHolder.from_wire(h) for h in holders)
               for xid, holders in cache.extent_rows()}
    return HolderMap([MapPage.of(bundles=bundles, extents=extents)])


def _narrowed(ctx, reachable: int):
    """ctx, or a copy whose coder is k-of-`reachable` when fewer than n
    nodes answer (records are then bundles of that n; zfec's share i is the
    same for any n, so readers decode them with their own coder)."""
    k, n = ctx.coder.k, ctx.coder.n
    if reachable >= n:
        return ctx
    if reachable < k:
        raise CheckError(f"only {reachable} nodes are reachable, fewer than k={k}: the "
                         f"repair's new holders are kept and written by a later check")
    return JobContext(ctx.reactor, ctx.home, ctx.network, ctx.pool, ctx.monitor, ctx.progress,
                      SegmentCoder(k, reachable), ctx.clock)


def _stream_lengths(client_index) -> dict:
    lengths = {}
    for _, record in client_index.extent_rows():
        extent = Extent.from_wire(record)
        lengths[extent.holders[0].key] = stream_length(extent)
    return lengths


class Check:
    """ctx: a JobContext. repair: re-create what is below m; subset: a
    rotation.DataSubset to download and hash-check; grace: seconds a node
    may be unreachable before its shares count as lost; m: repair below m
    healthy shares (None: health.default_m); interval: the
    agent's schedule (None: a run by hand checks the whole cycle's due part);
    clock: the present for the rotation and the grace (None: the reactor's;
    the CLI passes context.wall_clock, so FLUD_NOW can drive a week of daily
    checks in minutes)."""

    def __init__(self, ctx, repair=False, subset=None, grace=DEFAULT_GRACE, cycle=WEEK,
                 interval=None, clock=None, m=None, margin=SAFETY_MARGIN):
        self.ctx, self.repair, self.subset = ctx, repair, subset
        self.clock = clock
        self.policy = RepairPolicy(m=m, grace=grace, margin=margin)
        self.left_out = 0   # objects prune is deleting: not checked
        # why the head checked may not be the newest (fewer than a majority of
        # the root's holders answered), or "": a newer head may be on the others
        self.unconfirmed = ""
        self.cycle, self.interval = cycle, interval

    @defer.inlineCallbacks
    def _reserve_working_set(self):
        """A repair's fetched and re-made shares come out of the memory
        budget as the run's plan says (client/budget_plan.py): reserved
        before it starts, on a "repair" transfer closed when it ends."""
        ctx = self.ctx
        memory = ctx.monitor.transfer("repair", "fetched and re-made shares")
        if self.repair:
            plan = plan_budget(ctx.monitor.budget_bytes, len(ctx.network.nodes))
            wanted = repair_working_bytes(ctx.coder.k, ctx.coder.n, STREAM_CHUNK, REPAIR_IN_FLIGHT)
            yield memory.reserve(plan.repair_bytes(wanted), "working")
        return memory

    def _state(self) -> CheckState:
        saved = self.ctx.index.get_meta(STATE_META)
        return CheckState.from_wire(saved) if saved else CheckState()

    @defer.inlineCallbacks
    def run(self):
        ctx = self.ctx
        _, repo = yield open_repository(ctx, least=CHECK_LEAST)
        if repo is None:
            raise CheckError("the nodes hold no version-2 repository for this key: "
                             "back up once with this flud first")
        self.unconfirmed = repo.unconfirmed
        try:
            report = yield self._run(repo)
        finally:
            repo.close()
        return report

    @defer.inlineCallbacks
    def _run(self, repo):
        ctx, index = self.ctx, self.ctx.index
        holder_map = _holder_map(repo.cache)
        objects = objects_from_map(holder_map, ctx.coder.k, _stream_lengths(index))
        pruning = pending_object_ids(index)
        kept = [obj for obj in objects if obj.object_id not in pruning]
        self.left_out, objects = len(objects) - len(kept), kept
        challenges = IndexChallenges(index, repo.cache)
        state = self._state()
        for key, node in deleted_copies(index):   # gone by prune: no longer reported surplus
            state.book.pruned(key, node)

        def challenge_of(share):
            return probe_of(ctx.secret, share, challenges.get(share.key))

        def save(current):
            index.set_meta(STATE_META, current.to_wire())

        job = CheckJob(ctx.reactor, ctx.network, state, challenge_of, ctx.pool.run,
                       policy=self.policy, cycle=self.cycle, interval=self.interval,
                       on_progress=save, clock=self.clock)
        memory = yield self._reserve_working_set()
        try:
            report = yield job.run(objects, repair=self.repair, subset=self.subset)
        finally:
            memory.close()
        save(state)
        if report.moved:
            away = state.book.unreachable_since
            reachable = sum(1 for nid in ctx.network.alive_ids() if nid.hex() not in away)
            yield self._record_moves(_narrowed(ctx, reachable), repo, holder_map, report.moved)
            state.recorded()
            save(state)
        elif self.repair:
            # The root record too lives on nodes that leave: put it again on
            # the nodes that rank highest now (ROOT_PUT replaces, costs a few KiB).
            yield put_root_again(ctx, repo)   # (client/repository/head.py: never over a newer root)
        return report

    @defer.inlineCallbacks
    def _record_moves(self, ctx, repo, holder_map, moved):
        """The repaired objects' new holders as a map page in a new head,
        and in every local copy of them: the local copies first, so no
        backup in between reads the old holders (the shares are on the new
        nodes already; a run killed before the page is written finds the
        moves in the check state and writes it then)."""
        ctx.index.repaired(moved)
        page = map_page(holder_map, moved)
        sealer = BlobSealer(ctx.secret)
        small = record_sender(ctx)
        try:
            page_id, sealed = sealer.seal(page.encode())
            refs, bundles, challenges = yield store_blobs(small, [(page_id.hex(), sealed)])
            ctx.index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
            ctx.index.add_challenges(challenges.items())
            ref = refs[page_id.hex()]
            head = Head.of_repository(repo)
            moved_bundles = {bid: b for bid, b in page.bundles}
            # the pages' own bundles, with their new holders where repaired
            pages = tuple((r, moved_bundles.get(r.bundle, b)) for r, b in repo.index.pages)
            new_index = repo.index._replace(pages=pages + ((ref, bundles[ref.bundle]),))
            newest = head.snapshot
            bundle = head.final.get(newest.bundle) or repo.cache.bundle(newest.bundle)
            if newest.bundle in moved_bundles:   # a repaired head bundle: its new holders
                bundle = moved_bundles[newest.bundle]
            yield write_head(ctx, small, head, new_index, sealer, newest=newest.blob_id,
                             newest_bundle=(newest, newest.bundle, bundle), least=CHECK_LEAST)
        finally:
            small.close()
        ctx.index.add_bundles((bid, b.to_wire()) for bid, b in page.bundles)
