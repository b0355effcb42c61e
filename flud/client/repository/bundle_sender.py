"""The bundle sender: sealed records and small files' stored bytes go into
the aggregator, which codes bundles and fills one tar per destination node;
each sealed tar is one STORE, sent from the reactor. Every writer of the
repository sends through it: a backup's small files and records
(backup/small_files.py adds the file reading), a head's records
(repository/head.py), prune's repacked members and repair's map pages.
Repair's re-made bundle shares, which go to chosen nodes under known keys,
are written by share_tar() here too: the client's one tar path.

Memory (the whole budget: see backup/backup_job.py): what the aggregator
may grow by is reserved first as a free-standing "credit" (about one
bundle's shares, see Aggregator.add_cost); afterwards what the aggregator
holds is attributed to the open bundle ("building") and to one transfer per
tar (kind "tar", "building" then "sealed" until its node answered), and the
rest goes back. When a reservation has to wait and no tar is on its way,
open tars are sealed and sent, so memory comes back.

Its tallies (counters: bytes_sent, stores, tars; summary:
reduced_redundancy) are its own unless a run hands over its own; they are
written on the reactor thread only.
"""
import logging
import threading

import blake3
import zfec
from twisted.internet import defer
from twisted.python import failure

from flud.aggregator.aggregator import MEMBER_OVERHEAD, Aggregator
from flud.aggregator.policy import DEFAULT_MAX_PENDING_BYTES, FlushPolicy
from flud.aggregator.records import PlacementExhausted
from flud.aggregator.tarball import END_OF_ARCHIVE, TarWriter
from flud.client.repository.segments import challenges_for
from flud.client.repository.share_challenges import PackedChallenges
from flud.client.gather import settle_all
from flud.client.budget_plan import plan_budget
from flud.client.records import Bundle, ShareHolder
from flud.client.repository.tree_records import BlobRef
from flud.compression import working_bytes
from flud.protocol.messages import KIND_ARCHIVE
from flud.errors import StoreFailed
from flud.trust.placement_rules import most_per_host

log = logging.getLogger("flud.client")

SMALL_BATCH = 256            # small files handed to one pool call (backup/small_files.py)...
SMALL_BATCH_BYTES = 4 * 1024 * 1024   # ...or this many bytes, whichever first
# The credit one call may grow the aggregator by: this share of the budget
# (at least one bundle's shares). Fewer, larger calls: the small files are
# the critical path of a mixed backup, and every call waits for the reactor.
CALL_CREDIT_SHARE = 8
MAX_TARS_IN_FLIGHT = 16


class BundleSender:
    """counters and summary: the tallies it adds to (a run's; its own if
    not given). plan: the run's BudgetPlan (client/budget_plan.py: what
    the connections and the large files of the same run hold, so the
    aggregator's own bound leaves room for them; none given: a plan for a
    run of the known nodes without large files).
    open() before use, close() after (its memory goes back)."""

    def __init__(self, ctx, small_file_limit, plan=None, counters=None, summary=None):
        self.ctx = ctx
        self.k, self.n = ctx.coder.k, ctx.coder.n
        self.plan = plan or plan_budget(ctx.monitor.budget_bytes, len(ctx.network.nodes))
        self.counters = counters if counters is not None else {
            "bytes_sent": 0, "stores": 0, "tars": 0}
        self.summary = summary if summary is not None else {}
        self.policy = self._small_policy(small_file_limit)
        self._pending_blobs = set()  # blob ids of version-2 records, waiting for their bundle
        self.blob_refs = []         # BlobRef of each record whose bundle is known
        self._bundles = {}          # bundle id hex -> Bundle
        self._bundle_files = {}     # bundle id hex -> [(content id, offset, length)]
        self._stored = {}           # (bundle id hex, share index) -> node that took it
        self._challenges = PackedChallenges()
        self._tars_in_flight = []
        self._tar_failure = None    # the first tar that failed for good (raised by the run)
        self._tar_slots = defer.DeferredSemaphore(MAX_TARS_IN_FLIGHT)
        # The aggregator is filled in a worker and drained on the reactor.
        self._aggregator_lock = threading.Lock()
        self._sealed = []
        self._credit = 0            # budget reserved for the aggregator to grow into
        self._bundle_memory = None  # the open bundle's memory transfer
        self._tar_memory = {}       # tar serial -> its memory transfer
        self._small_calls = 0       # pool calls adding to the aggregator now
        self.aggregator = None

    def open(self, with_files: bool) -> None:
        """A new aggregator; the open bundle's memory transfer if there are
        small files to send."""
        self.aggregator = self._new_aggregator()
        if with_files:
            self._bundle_memory = self.ctx.monitor.transfer("bundle", "open bundle")

    @defer.inlineCallbacks
    def finish(self):
        """What is still open goes out, and every tar lands (or moves). A
        failed tar's shares move into open tars: those are sealed and sent
        in turn, until nothing is open or in flight (records() hands out a
        bundle only once every share of it landed)."""
        while True:
            with self._aggregator_lock:
                self.aggregator.flush()
            self._account_small()
            self._send_sealed()
            self._raise_tar_failure()
            if not self._tars_in_flight:
                return
            yield settle_all(list(self._tars_in_flight))
            self._raise_tar_failure()

    def close(self) -> None:
        """Its memory goes back, landed or not."""
        for memory in self._tar_memory.values():
            memory.close()
        self._tar_memory.clear()
        if self._bundle_memory is not None:
            self._bundle_memory.close()
        if self._credit:
            self.ctx.monitor.unreserve(self._credit)
            self._credit = 0

    def records(self):
        """(bundles, challenges) to keep in the index: the bundles every
        share of which a node acknowledged storing, on the node the record
        names (a bundle with a share still on its way, or moving off a node
        that failed, waits for a later call); each of their small files
        goes to file_landed()."""
        self._collect_bundles()
        landed = {}
        for bundle_id, bundle in list(self._bundles.items()):
            if all(self._stored.get((bundle_id, h.index)) == h.node for h in bundle.holders):
                landed[bundle_id] = self._bundles.pop(bundle_id)
                for h in bundle.holders:
                    self._stored.pop((bundle_id, h.index), None)
                if len({h.node for h in bundle.holders}) < len(bundle.holders):
                    self.summary["reduced_redundancy"] = (
                        self.summary.get("reduced_redundancy", 0) + 1)
        for bundle_id in landed:
            for content_id, offset, length in self._bundle_files.pop(bundle_id, ()):
                if content_id in self._pending_blobs:
                    self._pending_blobs.discard(content_id)
                    self.blob_refs.append(BlobRef(content_id, bundle_id, offset, length))
                    continue
                self.file_landed(content_id, bundle_id, offset, length)
        challenges, self._challenges = self._challenges, PackedChallenges()
        return landed, challenges

    def file_landed(self, content_id, bundle_id, offset, length) -> None:
        """A member that is not a record landed (a small file: its sender
        says what it is)."""
        raise StoreFailed(f"bundle {bundle_id[:16]} holds {content_id[:16]}, which no "
                          f"one handed over: a bug, please report it")

    def _small_policy(self, small_file_limit):
        """The aggregator's own bound comes out of the budget: what is left
        once the connections' share, the large files' segments and one
        small-file call are counted (never more than its default, never less
        than one tar)."""
        policy = FlushPolicy(small_file_limit=small_file_limit)
        left = self.plan.left(policy.bundle_target,
                              self._work_bytes(policy, policy.small_file_limit),
                              self._credit_bytes(policy, SMALL_BATCH_BYTES, 0, 0))
        least = max(policy.tar_target, 2 * policy.bundle_target + 1)
        return FlushPolicy(small_file_limit=small_file_limit,
                           max_pending_bytes=min(DEFAULT_MAX_PENDING_BYTES, max(least, left)))

    def _work_bytes(self, policy, largest):
        """Held only during a pool call: the file being read, compressed and
        encrypted (its compressed copy beside it for a moment), and the parity
        (plus one padded block) of a bundle being coded (a bundle holds at
        most bundle_target, or one larger file)."""
        block = -(-max(policy.bundle_target, largest) // self.k)
        return largest + working_bytes(largest) + (self.n - self.k + 1) * block

    def _credit_bytes(self, policy, batch_bytes, bundle_bytes, tars):
        """What one call may grow the aggregator by: n/k of the batch and of
        the open bundle as shares, with their headers, but no more than a
        share of the budget (at least one bundle's shares).
        Aggregator.add_cost() is the exact bound per file, which the worker
        checks; this sizes the reservation."""
        block = -(-policy.bundle_target // self.k)
        one_bundle = self.n * (block + MEMBER_OVERHEAD)
        cap = max(one_bundle, self.ctx.monitor.budget_bytes // CALL_CREDIT_SHARE)
        bundles = -(-(batch_bytes + bundle_bytes) // policy.bundle_target) + 1
        batch = (-(-self.n * (batch_bytes + bundle_bytes) // self.k)
                 + bundles * self.n * MEMBER_OVERHEAD)
        return min(cap, batch) + len(END_OF_ARCHIVE) * (tars + 2 * self.n)

    def _new_aggregator(self):
        k, n = self.k, self.n
        encoder = zfec.Encoder(k, n)

        def encode(blocks):  # the aggregator wants all n shares, primaries first
            blocks = list(blocks)
            return blocks + (encoder.encode(blocks, list(range(k, n))) if n > k else [])

        def place(bundle_id, count):
            # n holders and spares (for a tar that fails) if there are that
            # many live nodes; down to k (a node then takes more than one
            # share of a bundle: reduced redundancy, said in the summary).
            nodes = self.ctx.network.place(bundle_id, count)
            if len(nodes) < k:
                raise StoreFailed(_too_few(len(nodes), k, n)
                                  + self.ctx.network.health.quota_note())
            if len(nodes) < n and _hosts_too_few(self.ctx.network, len(nodes), k, n):
                raise StoreFailed(f"only {len(nodes)} distinct hosts (/24, /48) may take "
                                  f"this bundle's {n} shares: one would hold more than "
                                  f"n - k = {n - k}, and losing it would lose the bundle. "
                                  f"Add nodes on other hosts or lower n.")
            return [nid.hex() for nid in nodes]

        return Aggregator(self.policy, k, n, encode=encode,
                          hash=lambda b: blake3.blake3(b).digest(), place=place,
                          clock=self.ctx.clock, spares=2, min_distinct=k)

    def holds_blob(self, blob_id: str) -> bool:
        """A record handed over and not yet in a landed bundle's list."""
        return blob_id in self._pending_blobs

    @defer.inlineCallbacks
    def add_blob(self, blob_id: str, sealed: bytes):
        """A version-2 record's sealed blob, bundled beside the small files
        (on the reactor). A record is a few KiB and takes no credit of its
        own; when the aggregator is at its bound, tars land first."""
        while True:
            with self._aggregator_lock:
                if not self.aggregator.must_drain():
                    self._pending_blobs.add(blob_id)
                    self.aggregator.add(blob_id, sealed)
                    self._sealed.extend(self.aggregator.take_sealed())
                    break
            if not self._tars_in_flight and not self._relieve():
                raise StoreFailed("the small-file aggregator is at its bound with nothing "
                                  "to send: a bug, please report it")
            yield self._wait_one_tar()
        self._account_small()
        self._send_sealed()

    def add_blobs(self, items):
        """add_blob() of (blob id, sealed) items: those the aggregator has
        room for at once, under one lock, accounting and send (a backup's
        tree hands over a directory's records a few at a time); None if
        all were taken, else a Deferred that fires once the rest were
        (add_blob, one by one)."""
        taken = 0
        with self._aggregator_lock:
            for blob_id, sealed in items:
                if self.aggregator.must_drain():
                    break
                self._pending_blobs.add(blob_id)
                self.aggregator.add(blob_id, sealed)
                taken += 1
            self._sealed.extend(self.aggregator.take_sealed())
        if taken:
            self._account_small()
            self._send_sealed()
        if taken == len(items):
            return None
        return self._add_each(items[taken:])

    @defer.inlineCallbacks
    def _add_each(self, items):
        for blob_id, sealed in items:
            yield self.add_blob(blob_id, sealed)

    @defer.inlineCallbacks
    def _reserve_small(self, nbytes):
        """Budget for one pool call. While it waits, tars in flight landing
        is what makes room; with none in flight, open tars are sealed and
        sent (half of their bytes, largest first), or else the open bundle is
        coded into tars, so the small files never wait on themselves."""
        granted = self.ctx.monitor.reserve(nbytes)
        while not granted.called:
            if self._tars_in_flight:
                yield _first_of([granted] + list(self._tars_in_flight))
            elif not self._relieve():
                break  # nothing of ours to send: the large files will make room
        # Counted as credit by the caller only now: an _account_small() run
        # meanwhile (a tar landing) must not give this back as unused.
        return (yield granted)

    def _relieve(self):
        """Seal half of what the open tars hold, or the open bundle if no tar
        is open. False if there was nothing to seal."""
        with self._aggregator_lock:
            open_bytes = sum(size for _, size, sealed in self.aggregator.pending_tars().values()
                             if not sealed)
            if open_bytes:
                self.aggregator.seal_open_tars(open_bytes // 2)
            elif not self.aggregator.seal_bundle():
                return False
        self._account_small()
        self._send_sealed()
        return True

    def _account_small(self):
        """Attribute what the aggregator holds, out of the credit: the open
        bundle to its transfer, each tar to its own. A tar that landed (or
        moved away) closes, and its bytes go back to the budget; once no pool
        call is running, so does the rest of the credit and the work. Bytes
        beyond what was reserved (shares moved off a failed node) are counted
        all the same (held)."""
        if self._bundle_memory is None or self._bundle_memory.closed:
            return
        # A waiting reservation granted halfway would resume the small-file
        # loop (even start a pool call) on half-settled accounts.
        with self.ctx.monitor.no_admission():
            self._account_once()

    def _account_once(self):
        with self._aggregator_lock:
            bundle = self.aggregator.bundle_bytes
            tars = self.aggregator.pending_tars()
        for serial in [s for s in self._tar_memory if s not in tars]:
            self._tar_memory.pop(serial).close()
        self._attribute(self._bundle_memory, "building", bundle)
        for serial, (node, size, sealed) in tars.items():
            memory = self._tar_memory.get(serial)
            if memory is None:
                memory = self._tar_memory[serial] = self.ctx.monitor.transfer("tar", node[:16])
            if sealed and (memory.reserved("building") or memory.held("building")):
                held = memory.held("building")
                if held:
                    memory.hold(held, "sealed")
                    memory.release(held, "building")
                memory.hand_over(memory.reserved("building"), "building", to_what="sealed")
            self._attribute(memory, "sealed" if sealed else "building", size)
        if not self._small_calls:  # what the last call did not use goes back
            work = self._bundle_memory.reserved("work")
            if work:
                self._bundle_memory.unreserve(work, "work")
            if self._credit:
                self.ctx.monitor.unreserve(self._credit)
                self._credit = 0

    def _attribute(self, memory, what, size):
        """Make `memory` count `size` bytes under `what`, taken from the
        credit or given back to it."""
        have = memory.reserved(what) + memory.held(what)
        if size > have:
            take = min(size - have, self._credit)
            self.ctx.monitor.hand_over(take, memory, what)
            self._credit -= take
            if size - have > take:
                memory.hold(size - have - take, what)
        elif size < have:
            give = have - size
            held = min(give, memory.held(what))
            if held:
                memory.release(held, what)
            memory.hand_over(give - held, what, self.ctx.monitor)
            self._credit += give - held

    def _send_sealed(self):
        with self._aggregator_lock:
            self._sealed.extend(self.aggregator.take_sealed())
        sealed, self._sealed = self._sealed, []
        for tar in sealed:
            d = self._tar_slots.run(self._store_tar, tar)
            self._tars_in_flight.append(d)
            d.addBoth(self._tar_finished, d)

    def _tar_finished(self, result, d):
        if d in self._tars_in_flight:
            self._tars_in_flight.remove(d)
        if isinstance(result, failure.Failure):
            # Kept for the run to raise (_raise_tar_failure), never left in a
            # Deferred nobody waits on any more: a tar may fail after the run
            # stopped waiting for it.
            if self._tar_failure is None:
                self._tar_failure = result
            return None
        return result

    def _raise_tar_failure(self, result=None):
        if self._tar_failure is not None:
            self._tar_failure.raiseException()
        return result

    def _wait_one_tar(self):
        if not self._tars_in_flight:
            return defer.maybeDeferred(self._raise_tar_failure)
        return defer.DeferredList(list(self._tars_in_flight), fireOnOneCallback=True,
                                  fireOnOneErrback=True, consumeErrors=True
                                  ).addCallback(self._raise_tar_failure)

    @defer.inlineCallbacks
    def _store_tar(self, tar):
        node_id = bytes.fromhex(tar.node)
        challenges = yield self.ctx.pool.run(tar_challenges, self.ctx.secret, tar)
        self._challenges.update(challenges)
        try:
            yield self.ctx.network.store(node_id, tar.key, tar.data, KIND_ARCHIVE)
        except Exception as err:
            log.warning("a tar for node %s failed (%s); moving its shares", tar.node[:12], err)
            self.ctx.network.blame(node_id, err)
            try:
                with self._aggregator_lock:
                    moves = self.aggregator.replace(tar)
            except PlacementExhausted:
                live = len(self.ctx.network.alive_ids())
                raise StoreFailed(_too_few(live, self.k, self.n)
                                  + self.ctx.network.health.quota_note()) from None
            self._apply_moves(moves)
            self._account_small()
            self._send_sealed()
            return
        with self._aggregator_lock:
            self.aggregator.confirm(tar)
        for member in tar.members:   # the share is on this node: the record may say so
            self._stored[(member.bundle_id.hex(), member.share_index)] = tar.node
        self._account_small()
        self.counters["bytes_sent"] += len(tar.data)
        self.counters["stores"] += 1
        self.counters["tars"] += 1
        self._collect_bundles()

    def _collect_bundles(self):
        with self._aggregator_lock:
            records = self.aggregator.take_bundles()
        for record in records:
            bundle_id = record.bundle_id.hex()
            self._bundles[bundle_id] = Bundle(
                record.length, record.k, record.n, record.block_length,
                tuple(ShareHolder(s.index, s.key.hex(), s.node) for s in record.shares))
            self._bundle_files[bundle_id] = [(f.file_id, f.offset, f.length)
                                             for f in record.files]

    def _apply_moves(self, moves):
        self._collect_bundles()
        for move in moves:
            bundle_id = move.bundle_id.hex()
            bundle = self._bundles.get(bundle_id)
            if bundle is None:
                continue
            self._bundles[bundle_id] = bundle.moved(move.index, move.to_node)

def share_tar(shares) -> tuple:
    """(key, data) of one tar of whole shares, [(share key hex, bytes)] in
    order, as the aggregator writes its tars: a STORE of KIND_ARCHIVE under
    the tar's BLAKE3 (what repair sends a node in one request)."""
    writer = TarWriter()
    for key, data in shares:
        writer.add(key, data)
    data = writer.seal()
    return blake3.blake3(data).digest(), data


def _too_few(live: int, k: int, n: int) -> str:
    return (f"only {live} nodes are reachable; a bundle of small files needs at least "
            f"k={k} distinct nodes for its n={n} shares. Start more nodes (`flud testnet "
            f"status`), or make a client home with a lower --k")


def _first_of(deferreds):
    """Fires (with None) once any of `deferreds` has fired; they are left as
    they are, results and failures passed on."""
    first = defer.Deferred()

    def fired(result):
        if not first.called:
            first.callback(None)
        return result

    for d in deferreds:
        d.addBoth(fired)
    return first


def _hosts_too_few(network, hosts: int, k: int, n: int) -> bool:
    """Where the trust rules keep one share of an object per host (not on a
    loopback testnet), would n shares taking turns over `hosts` put more
    than n - k on one (flud/trust/placement_rules.py)?"""
    trust = getattr(network, "trust", None)
    return (trust is not None and trust.diverse(network.nodes)
            and most_per_host(n, hosts) > n - k)


@defer.inlineCallbacks
def store_blobs(small, blobs):
    """Hand blobs [(blob id, sealed)] to a BundleSender and land them in a
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


def tar_challenges(secret, tar):
    """{member key hex: [Challenge]} of a tar's members (in the pool)."""
    view = memoryview(tar.data)
    return {m.member_key.hex(): challenges_for(secret, m.member_key,
                                                view[m.data_offset:m.data_offset + m.length])
            for m in tar.members}


def record_sender(ctx):
    """A BundleSender for records alone (forget, tag, prune, repair: no
    file data), opened; close() it when done."""
    sender = BundleSender(ctx, ctx.home.config["small_file_limit"])
    sender.open(with_files=False)
    return sender
