"""A backup's small files: read, compressed if that saves enough and
encrypted one by one (convergent: flud/client/repository/small_contents.py), and
added to the aggregator in a worker, which codes bundles and fills one tar
per destination node; each sealed tar is one STORE, sent from the reactor.

Memory (the whole budget: see run.py): each pool call first reserves the
most the aggregator may grow by (a free-standing "credit": about one
bundle's shares, see Aggregator.add_cost) and, on the open bundle (kind
"bundle"), the file being read and compressed and the parity of a bundle
being coded ("work"). Afterwards what the aggregator holds is attributed to
the open bundle ("building") and to one transfer per tar (kind "tar",
"building" then "sealed" until its node answered), and the rest goes back. When a
reservation has to wait and no tar is on its way, open tars are sealed and
sent, so memory comes back.

SmallFiles is a part of the backup run (run.py): it is given the job's
context, the run's content log and tallies, and nothing else of the run.
The tallies are written on the reactor thread only: a worker returns its
counts with its result.
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
from flud.aggregator.tarball import END_OF_ARCHIVE
from flud.client.backup.challenges import PackedChallenges, tar_challenges
from flud.client.backup.file_reading import FileChanged, read_small, why_skipped
from flud.client.repository.small_contents import seal_small
from flud.client.gather import settle_all
from flud.client.network import network_share
from flud.client.records import Bundle, ShareHolder, SmallContent
from flud.client.repository.segments import StoreFailed
from flud.client.repository.tree_records import BlobRef
from flud.compression import working_bytes
from flud.crypto import content_digest, convergent_key
from flud.protocol.messages import KIND_ARCHIVE

log = logging.getLogger("flud.client")

SMALL_BATCH = 256            # small files handed to one pool call...
SMALL_BATCH_BYTES = 4 * 1024 * 1024   # ...or this many bytes, whichever first
# The credit one call may grow the aggregator by: this share of the budget
# (at least one bundle's shares). Fewer, larger calls: the small files are
# the critical path of a mixed backup, and every call waits for the reactor.
CALL_CREDIT_SHARE = 8
MAX_TARS_IN_FLIGHT = 16


def _batches(entries):
    batch, size = [], 0
    for entry in entries:
        batch.append(entry)
        size += entry.size
        if len(batch) >= SMALL_BATCH or size >= SMALL_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class SmallFiles:
    """contents: the run's ContentLog; counters and summary: the run's
    tallies; skip(path, why): a file that could not be read (called on the
    reactor). segment_footprint, parallel_files: what the large files of
    the same run hold, so the aggregator's own bound leaves room for them."""

    def __init__(self, ctx, small_file_limit, segment_footprint, parallel_files, contents,
                 counters, summary, skip):
        self.ctx = ctx
        self.k, self.n = ctx.coder.k, ctx.coder.n
        self.segment_footprint = segment_footprint
        self.parallel_files = parallel_files
        self.contents = contents
        self.counters = counters
        self.summary = summary
        self._skip = skip
        self.policy = self._small_policy(small_file_limit)
        self._pending_small = {}    # content id -> (key hex, size, method), waiting for its bundle
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
        self._small_call = False    # a pool call is adding to the aggregator
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
        that failed, waits for a later call); each of their small files'
        content goes to the content log."""
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
                key_hex, size, method = self._pending_small.pop(content_id)
                self.contents.remember(content_id, SmallContent(size, key_hex, bundle_id,
                                                                offset, length, method))
        challenges, self._challenges = self._challenges, PackedChallenges()
        return landed, challenges

    def _small_policy(self, small_file_limit):
        """The aggregator's own bound comes out of the budget: what is left
        once the connections' share, the large files' segments and one
        small-file call are counted (never more than its default, never less
        than one tar)."""
        policy = FlushPolicy(small_file_limit=small_file_limit)
        budget = self.ctx.monitor.budget_bytes
        left = (budget - self._network_bytes()
                - self.parallel_files * self.segment_footprint
                - policy.bundle_target - self._work_bytes(policy, policy.small_file_limit)
                - self._credit_bytes(policy, SMALL_BATCH_BYTES, 0, 0))
        least = max(policy.tar_target, 2 * policy.bundle_target + 1)
        return FlushPolicy(small_file_limit=small_file_limit,
                           max_pending_bytes=min(DEFAULT_MAX_PENDING_BYTES, max(least, left)))

    def _network_bytes(self) -> int:
        """The budget a run reserves for its connections (network_share)."""
        nodes = len(self.ctx.network.nodes)
        return sum(network_share(self.ctx.monitor.budget_bytes, nodes, self.segment_footprint).values())

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
                raise StoreFailed(_too_few(len(nodes), k, n))
            return [nid.hex() for nid in nodes]

        return Aggregator(self.policy, k, n, encode=encode,
                          hash=lambda b: blake3.blake3(b).digest(), place=place,
                          clock=self.ctx.clock, spares=2, min_distinct=k)

    @defer.inlineCallbacks
    def send_all(self, small, content_of):
        for batch in _batches(small):
            while batch:
                with self._aggregator_lock:
                    tars = sum(1 for *_, sealed in self.aggregator.pending_tars().values()
                               if not sealed)
                    bundle = self.aggregator.bundle_bytes
                credit = self._credit_bytes(self.policy, sum(e.size for e in batch), bundle, tars)
                work = self._work_bytes(self.policy, max(e.size for e in batch))
                self._credit += (yield self._reserve_small(work + credit))
                self.ctx.monitor.hand_over(work, self._bundle_memory, "work")
                self._credit -= work
                self._small_call = True
                try:
                    batch, drain, dedup, read = yield self.ctx.pool.run(
                        self._aggregate, batch, credit, content_of)
                    self.summary["dedup"] += dedup
                    self.counters["bytes_read"] += read
                finally:
                    self._small_call = False
                    self._account_small()
                self._send_sealed()
                if batch and drain:  # over the aggregator's own bound: let tars land
                    if not self._tars_in_flight:
                        with self._aggregator_lock:
                            self.aggregator.seal_open_tars()
                        self._account_small()
                        self._send_sealed()
                    yield self._wait_one_tar()
        # No more small files: what is open goes out now, not after the large
        # files (which may be waiting for the budget these tars hold).
        with self._aggregator_lock:
            self.aggregator.flush()
        self._account_small()
        self._send_sealed()

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

    def _aggregate(self, batch, credit, content_of):
        """In a worker: read, encrypt and add small files one at a time while
        the aggregator grows by at most `credit` (reserved by the caller) and
        stays under its own bound. Returns (files not taken, over the bound?,
        files deduplicated, bytes read): the counts go to the run's tallies
        on the reactor thread, their only writer. The first file always goes
        in, so every call makes progress."""
        done = []  # sizes of the files taken, reported in one go
        try:
            return self._aggregate_files(batch, credit, content_of, self.ctx.secret,
                                         self.aggregator, done)
        finally:
            if done:
                self.ctx.reactor.callFromThread(self._files_done, done)

    def _aggregate_files(self, batch, credit, content_of, secret, aggregator, done):
        used = dedup = read = 0
        contents = self.contents
        for i, entry in enumerate(batch):
            # Without the lock: a few counters, read while the reactor may
            # confirm a tar (which only lowers them); checked again below.
            if aggregator.must_drain():
                return batch[i:], True, dedup, read
            if i and used + aggregator.add_cost(entry.size) > credit:
                return batch[i:], False, dedup, read
            try:
                data = read_small(entry)
            except (OSError, FileChanged) as err:
                self.ctx.reactor.callFromThread(self._skip, entry.path, why_skipped(err))
                continue
            digest = content_digest(data)
            content_id = digest.hex()
            if content_id in contents or content_id in self._pending_small:
                dedup += 1
            else:
                key = convergent_key(secret, digest)
                method = seal_small(key, data)
                # What the aggregator takes is the stored bytes, and their
                # cost is the one that counts: a shorter file may fit in the
                # open bundle where the plaintext would have sealed it.
                if i and used + aggregator.add_cost(len(data)) > credit:
                    return batch[i:], False, dedup, read
                with self._aggregator_lock:
                    if aggregator.must_drain():  # tars moved here meanwhile
                        return batch[i:], True, dedup, read
                    before = aggregator.pending_bytes
                    self._pending_small[content_id] = (key.hex(), entry.size, method)
                    aggregator.add(content_id, data)
                    used += aggregator.pending_bytes - before
                    self._sealed.extend(aggregator.take_sealed())
            del data
            content_of[entry.path] = content_id
            read += entry.size
            done.append(entry.size)
        return [], False, dedup, read

    def _files_done(self, sizes):
        for size in sizes:
            self.ctx.progress.file_done(size)

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
        if not self._small_call:  # what the last call did not use goes back
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
            yield self.ctx.network.call(node_id, "store", tar.key, tar.data, KIND_ARCHIVE)
        except Exception as err:
            log.warning("a tar for node %s failed (%s); moving its shares", tar.node[:12], err)
            self.ctx.network.blame(node_id, err)
            try:
                with self._aggregator_lock:
                    moves = self.aggregator.replace(tar)
            except PlacementExhausted:
                live = len(self.ctx.network.alive_ids())
                raise StoreFailed(_too_few(live, self.k, self.n)) from None
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
