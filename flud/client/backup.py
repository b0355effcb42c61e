"""`flud backup`: scan, skip what is unchanged, send the rest, write a snapshot.

Small files: encrypted one by one (convergent) into the aggregator, which
codes bundles and fills one tar per destination node; each sealed tar is one
STORE. Large files: in extents, one streamed STORE per node per extent
(flud/client/extents.py), from one segment's footprint per file used in two
halves (flud/client/large.py). Everything that lands is written to the
local index as it lands, so an interrupted run can be run again and sends
only what is missing.

Memory: every buffer comes out of the process budget (flud/memory.py) before
it exists. A large file reserves its segment (kind "upload"). For small
files, each pool call first reserves the most the aggregator may grow by (a
free-standing "credit": about one bundle's shares, see Aggregator.add_cost)
and, on the open bundle (kind "bundle"), the file being read and the parity
of a bundle being coded ("work"). Afterwards what the aggregator holds is
attributed to the open bundle ("building") and to one transfer per tar (kind
"tar", "building" then "sealed" until its node answered), and the rest goes
back. When a reservation has to wait and no tar is on its way, open tars are
sealed and sent, so memory comes back. The TLS send queues have their
allowance (Network.count_sends).
"""
import logging
import os
import struct
import threading
import time

import blake3
import zfec
from twisted.internet import defer

from aggregator.aggregator import MEMBER_OVERHEAD, Aggregator
from aggregator.policy import DEFAULT_MAX_PENDING_BYTES, FlushPolicy
from aggregator.tarball import END_OF_ARCHIVE
from flud.client import manifest as manifests
from flud.client.gather import settle_all
from flud.client.large import (FILE_FOOTPRINT, MAX_PARITY_SETS, MAX_SEGMENT_WINDOW,
                               FileChanged, LargeFiles, ParitySets)
from flud.client.network import network_share
from flud.client.records import (Bundle, Challenge, EmptyContent, ShareHolder,
                                 SmallContent)
from flud.client.scan import scan
from flud.client.segments import StoreFailed, challenges_for
from flud.coding import SegmentCoder
from flud.crypto import content_digest, convergent_key, crypt_ctr_in_place
from flud.protocol.messages import KIND_ARCHIVE

log = logging.getLogger("flud.client")

SMALL_BATCH = 256            # small files handed to one pool call...
SMALL_BATCH_BYTES = 4 * 1024 * 1024   # ...or this many bytes, whichever first
# The credit one call may grow the aggregator by: this share of the budget
# (at least one bundle's shares). Fewer, larger calls: the small files are
# the critical path of a mixed backup, and every call waits for the reactor.
CALL_CREDIT_SHARE = 8
LARGE_FILES_AT_ONCE = 3      # large files uploading at once
MAX_TARS_IN_FLIGHT = 16
EMPTY = EmptyContent(0)


def _read_small(entry):
    """The file's bytes in a buffer of their own (encrypted there later)."""
    data = bytearray(entry.size + 1)  # one more: a file that grew reads more
    with open(entry.path, "rb", buffering=0) as f:
        got = f.readinto(data)
    del data[got:]
    st = os.stat(entry.path)
    if got != entry.size or st.st_mtime_ns != entry.mtime_ns:
        raise FileChanged(f"{entry.path} changed while it was read")
    return data


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


def _why(err) -> str:
    if isinstance(err, OSError):
        return f"cannot read: {err.strerror or err}"
    return str(err)


class Backup(LargeFiles):
    def __init__(self, reactor, home, network, pool, monitor, progress, clock=time.monotonic,
                 parallel_files=None):
        self.reactor = reactor
        self.home = home
        self.index = home.index
        self.network = network
        self.pool = pool
        self.monitor = monitor
        self.progress = progress
        self.clock = clock
        cfg = home.config
        self.k, self.n = cfg["k"], cfg["n"]
        self.segment_size = cfg["segment_size"]
        self.coder = SegmentCoder(self.k, self.n)
        self.parallel_files = parallel_files or LARGE_FILES_AT_ONCE
        # A file holds the ciphertext (the k primary shares are views of it) of
        # up to segment_window segments and the n-k parity shares of one.
        parity = self.coder.block_length(self.segment_size) * (self.n - self.k)
        self.segment_window = max(1, min(MAX_SEGMENT_WINDOW,
                                         (FILE_FOOTPRINT - parity) // self.segment_size))
        self.segment_footprint = self.segment_window * self.segment_size + parity
        # Parity buffers, shared by the large files (ParitySets): a file
        # holds a set only while its parity is coded and taken.
        self.parity_sets = ParitySets(min(self.parallel_files, MAX_PARITY_SETS), self.n - self.k,
                                      self.coder.block_length(self.segment_size))
        self.policy = self._small_policy(cfg["small_file_limit"])
        self.counters = {"bytes_sent": 0, "stores": 0, "tars": 0, "bytes_read": 0}
        self.summary = {"new": 0, "changed": 0, "unchanged": 0, "skipped": 0, "dedup": 0}
        self.skipped = []
        self._new_contents = {}     # content id -> record, this run
        self._pending_small = {}    # content id -> file key hex, waiting for its bundle
        self._bundles = {}          # bundle id hex -> Bundle
        self._bundle_files = {}     # bundle id hex -> [(content id, offset, length)]
        self._challenges = _Challenges()
        self._tars_in_flight = []
        self._tar_slots = defer.DeferredSemaphore(MAX_TARS_IN_FLIGHT)
        # The aggregator is filled in a worker and drained on the reactor.
        self._aggregator_lock = threading.Lock()
        self._sealed = []
        self._credit = 0            # budget reserved for the aggregator to grow into
        self._bundle_memory = None  # the open bundle's memory transfer
        self._tar_memory = {}       # tar serial -> its memory transfer
        self._small_call = False    # a pool call is adding to the aggregator

    def _small_policy(self, small_file_limit):
        """The aggregator's own bound comes out of the budget: what is left
        once the connections' share, the large files' segments and one
        small-file call are counted (never more than its default, never less
        than one tar)."""
        policy = FlushPolicy(small_file_limit=small_file_limit)
        budget = self.monitor.budget_bytes
        left = (budget - self._network_bytes()
                - self.parallel_files * self.segment_footprint
                - policy.bundle_target - self._work_bytes(policy, policy.small_file_limit)
                - self._credit_bytes(policy, SMALL_BATCH_BYTES, 0, 0))
        least = max(policy.tar_target, 2 * policy.bundle_target + 1)
        return FlushPolicy(small_file_limit=small_file_limit,
                           max_pending_bytes=min(DEFAULT_MAX_PENDING_BYTES, max(least, left)))

    def _network_bytes(self) -> int:
        """The budget a run reserves for its connections (network_share)."""
        nodes = len(getattr(self.network, "nodes", ()))
        return sum(network_share(self.monitor.budget_bytes, nodes, self.segment_footprint).values())

    def _work_bytes(self, policy, largest):
        """Held only during a pool call: the file being read and encrypted,
        and the parity (plus one padded block) of a bundle being coded (a
        bundle holds at most bundle_target, or one larger file)."""
        block = -(-max(policy.bundle_target, largest) // self.k)
        return largest + (self.n - self.k + 1) * block

    def _credit_bytes(self, policy, batch_bytes, bundle_bytes, tars):
        """What one call may grow the aggregator by: n/k of the batch and of
        the open bundle as shares, with their headers, but no more than a
        share of the budget (at least one bundle's shares).
        Aggregator.add_cost() is the exact bound per file, which the worker
        checks; this sizes the reservation."""
        block = -(-policy.bundle_target // self.k)
        one_bundle = self.n * (block + MEMBER_OVERHEAD)
        cap = max(one_bundle, self.monitor.budget_bytes // CALL_CREDIT_SHARE)
        bundles = -(-(batch_bytes + bundle_bytes) // policy.bundle_target) + 1
        batch = (-(-self.n * (batch_bytes + bundle_bytes) // self.k)
                 + bundles * self.n * MEMBER_OVERHEAD)
        return min(cap, batch) + len(END_OF_ARCHIVE) * (tars + 2 * self.n)

    # ---- the run --------------------------------------------------------------

    @defer.inlineCallbacks
    def run(self, paths, excludes=()):
        started = self.clock()
        found = scan(paths, excludes)
        for path, why in found.skipped:
            self._skip(path, why)
        states = self.index.file_states()
        known = self.index.known_contents()
        files = []
        content_of = {}
        for entry in found.files:
            state = states.get(entry.path)
            if state and state.unchanged(entry) and state.content_id in known:
                content_of[entry.path] = state.content_id
                self.summary["unchanged"] += 1
            else:
                files.append(entry)
                self.summary["changed" if state else "new"] += 1
        self.progress.start(len(files), sum(e.size for e in files))
        self.aggregator = self._new_aggregator()
        small = [e for e in files if 0 < e.size < self.policy.small_file_limit]
        large = [e for e in files if e.size >= self.policy.small_file_limit]
        for entry in files:
            if entry.size == 0:
                content_of[entry.path] = self._remember("empty", EMPTY)
                self.progress.file_done(0)
        # Small files and large files go at once: their CPU work shares the
        # pool, and the nodes' round trips of one overlap the other's CPU.
        count_sends = getattr(self.network, "count_sends", None)
        sends = (count_sends(self.monitor, keep=self.segment_footprint)
                 if count_sends is not None else None)
        try:
            if small:
                self._bundle_memory = self.monitor.transfer("bundle", "open bundle")
            try:
                yield settle_all([self._all_small(small, content_of, known),
                                  self._all_large(large, content_of, known)])
                with self._aggregator_lock:
                    self.aggregator.flush()
                self._account_small()
                self._send_sealed()
                while self._tars_in_flight:  # a failed tar's shares may go out again
                    yield settle_all(list(self._tars_in_flight))
            finally:
                for memory in self._tar_memory.values():
                    memory.close()
                self._tar_memory.clear()
                if self._bundle_memory is not None:
                    self._bundle_memory.close()
                if self._credit:
                    self.monitor.unreserve(self._credit)
                    self._credit = 0
            self._finish_bundles()
            self._save_contents()
            self.index.record_files(
                (e.path, e.size, e.mtime_ns, e.ctime_ns, e.inode, content_of[e.path])
                for e in found.files if e.path in content_of)
            entries = manifests.entries_for(found, content_of, paths)
            snapshot = yield manifests.publish(self, entries, paths, started)
        finally:
            if sends is not None:
                sends.close()
        self.progress.finish()
        return snapshot

    # ---- small files ------------------------------------------------------------

    def _new_aggregator(self):
        k, n = self.k, self.n
        encoder = zfec.Encoder(k, n)

        def encode(blocks):  # the aggregator wants all n shares, primaries first
            blocks = list(blocks)
            return blocks + (encoder.encode(blocks, list(range(k, n))) if n > k else [])

        def place(bundle_id, count):
            nodes = self.network.place(bundle_id, count)
            if len(nodes) < count:  # a bundle needs n holders and its spares
                raise StoreFailed(
                    f"only {len(nodes)} nodes are reachable; {count} are needed for a "
                    f"bundle of small files (n={n} and {count - n} spares). Start more "
                    f"nodes, or make a client home with a lower --n")
            return [nid.hex() for nid in nodes]

        return Aggregator(self.policy, k, n, encode=encode,
                          hash=lambda b: blake3.blake3(b).digest(), place=place,
                          clock=self.clock, spares=2)

    @defer.inlineCallbacks
    def _all_small(self, small, content_of, known):
        for batch in _batches(small):
            while batch:
                with self._aggregator_lock:
                    tars = sum(1 for *_, sealed in self.aggregator.pending_tars().values()
                               if not sealed)
                    bundle = self.aggregator.bundle_bytes
                credit = self._credit_bytes(self.policy, sum(e.size for e in batch), bundle, tars)
                work = self._work_bytes(self.policy, max(e.size for e in batch))
                self._credit += (yield self._reserve_small(work + credit))
                self.monitor.hand_over(work, self._bundle_memory, "work")
                self._credit -= work
                self._small_call = True
                try:
                    batch, drain = yield self.pool.run(self._aggregate, batch, credit,
                                                       content_of, known)
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

    @defer.inlineCallbacks
    def _reserve_small(self, nbytes):
        """Budget for one pool call. While it waits, tars in flight landing
        is what makes room; with none in flight, open tars are sealed and
        sent (half of their bytes, largest first), or else the open bundle is
        coded into tars, so the small files never wait on themselves."""
        granted = self.monitor.reserve(nbytes)
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

    def _aggregate(self, batch, credit, content_of, known):
        """In a worker: read, encrypt and add small files one at a time while
        the aggregator grows by at most `credit` (reserved by the caller) and
        stays under its own bound. Returns (files not taken, over the bound?).
        The first file always goes in, so every call makes progress."""
        done = []  # sizes of the files taken, reported in one go
        try:
            return self._aggregate_files(batch, credit, content_of, known, self.home.secret,
                                         self.aggregator, done)
        finally:
            if done:
                self.reactor.callFromThread(self._files_done, done)

    def _aggregate_files(self, batch, credit, content_of, known, secret, aggregator, done):
        used = 0
        for i, entry in enumerate(batch):
            # Without the lock: a few counters, read while the reactor may
            # confirm a tar (which only lowers them); checked again below.
            if aggregator.must_drain():
                return batch[i:], True
            if i and used + aggregator.add_cost(entry.size) > credit:
                return batch[i:], False
            try:
                data = _read_small(entry)
            except (OSError, FileChanged) as err:
                self.reactor.callFromThread(self._skip, entry.path, _why(err))
                continue
            digest = content_digest(data)
            content_id = digest.hex()
            if content_id in known or content_id in self._new_contents \
                    or content_id in self._pending_small:
                self.summary["dedup"] += 1
            else:
                key = convergent_key(secret, digest)
                crypt_ctr_in_place(key, data)
                with self._aggregator_lock:
                    if aggregator.must_drain():  # tars moved here meanwhile
                        return batch[i:], True
                    before = aggregator.pending_bytes
                    self._pending_small[content_id] = (key.hex(), entry.size)
                    aggregator.add(content_id, data)
                    used += aggregator.pending_bytes - before
                    self._sealed.extend(aggregator.take_sealed())
            del data
            content_of[entry.path] = content_id
            self.counters["bytes_read"] += entry.size
            done.append(entry.size)
        return [], False

    def _files_done(self, sizes):
        for size in sizes:
            self.progress.file_done(size)

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
        with self.monitor.no_admission():
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
                memory = self._tar_memory[serial] = self.monitor.transfer("tar", node[:16])
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
                self.monitor.unreserve(self._credit)
                self._credit = 0

    def _attribute(self, memory, what, size):
        """Make `memory` count `size` bytes under `what`, taken from the
        credit or given back to it."""
        have = memory.reserved(what) + memory.held(what)
        if size > have:
            take = min(size - have, self._credit)
            self.monitor.hand_over(take, memory, what)
            self._credit -= take
            if size - have > take:
                memory.hold(size - have - take, what)
        elif size < have:
            give = have - size
            held = min(give, memory.held(what))
            if held:
                memory.release(held, what)
            memory.hand_over(give - held, what, self.monitor)
            self._credit += give - held

    @defer.inlineCallbacks
    def _all_large(self, large, content_of, known):
        slots = defer.DeferredSemaphore(self.parallel_files)

        @defer.inlineCallbacks
        def one(entry):
            try:
                content_of[entry.path] = yield self._large(entry, known)
            except (OSError, FileChanged) as err:
                self._skip(entry.path, _why(err))

        yield settle_all([slots.run(one, e) for e in large])

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
        return result

    def _wait_one_tar(self):
        if not self._tars_in_flight:
            return defer.succeed(None)
        return defer.DeferredList(list(self._tars_in_flight), fireOnOneCallback=True,
                                  fireOnOneErrback=True, consumeErrors=True)

    @defer.inlineCallbacks
    def _store_tar(self, tar):
        node_id = bytes.fromhex(tar.node)
        challenges = yield self.pool.run(_tar_challenges, self.home.secret, tar)
        self._challenges.update(challenges)
        try:
            yield self.network.call(node_id, "store", tar.key, tar.data, KIND_ARCHIVE)
        except Exception as err:
            log.warning("a tar for node %s failed (%s); moving its shares", tar.node[:12], err)
            self.network.blame(node_id, err)
            with self._aggregator_lock:
                moves = self.aggregator.replace(tar)
            self._apply_moves(moves)
            self._account_small()
            self._send_sealed()
            return
        with self._aggregator_lock:
            self.aggregator.confirm(tar)
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

    def _finish_bundles(self):
        self._collect_bundles()
        for bundle_id, files in self._bundle_files.items():
            for content_id, offset, length in files:
                key_hex, size = self._pending_small.pop(content_id)
                self._new_contents[content_id] = SmallContent(size, key_hex, bundle_id, offset,
                                                              length)
        self._bundle_files = {}

    def _remember(self, content_id, record):
        self._new_contents[content_id] = record
        return content_id

    def _save_contents(self):
        self.index.add_bundles((bid, b.to_wire()) for bid, b in self._bundles.items())
        self.index.add_contents((cid, c.to_wire()) for cid, c in self._new_contents.items())
        # one row a share, streamed in: the manifest reads them back the same way
        self.index.add_challenges(self._challenges.items())
        self._new_contents, self._bundles = {}, {}
        self._challenges = _Challenges()

    def _skip(self, path, why):
        self.summary["skipped"] += 1
        self.skipped.append((path, why))
        self.progress.warn(f"skipped {path}: {why}")


class _Challenges:
    """The VERIFY challenges of the shares sent this run, packed: 88 bytes a
    share instead of ~560 as lists of ints and hex strings (2.3 MB for the
    4096 shares of a 1 GiB file, kept until the run ends)."""

    _ONE = struct.Struct(">QQ16s")  # offset, span, expected digest
    _KEY = 32

    def __init__(self):
        self._data = bytearray()
        self._count = 0

    def __len__(self):
        return self._count

    def update(self, challenges):
        """{share key hex: [Challenge], ...}, as challenges_for() (nonces derived)."""
        data = self._data
        for key_hex, items in challenges.items():
            key = bytes.fromhex(key_hex)
            if len(key) != self._KEY or len(items) > 255:
                raise ValueError(f"unexpected challenges for share {key_hex!r}")
            data += key
            data.append(len(items))
            for challenge in items:
                digest = bytes.fromhex(challenge.digest)
                if len(digest) != 16 or challenge.nonce is not None:
                    raise ValueError(f"unexpected challenge {challenge!r}")
                data += self._ONE.pack(challenge.offset, challenge.span, digest)
            self._count += 1

    def items(self):
        """(share key hex, [challenge as written]), in the order added."""
        view, pos, one = memoryview(self._data), 0, self._ONE
        while pos < len(view):
            key_hex = view[pos:pos + self._KEY].hex()
            count = view[pos + self._KEY]
            pos += self._KEY + 1
            items = []
            for _ in range(count):
                offset, span, digest = one.unpack_from(view, pos)
                pos += one.size
                items.append(Challenge(offset, span, digest.hex()).to_wire())
            yield key_hex, items


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


def _tar_challenges(secret, tar):
    view = memoryview(tar.data)
    return {m.member_key.hex(): challenges_for(secret, m.member_key,
                                                view[m.data_offset:m.data_offset + m.length])
            for m in tar.members}
