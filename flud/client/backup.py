"""`flud backup`: scan, skip what is unchanged, send the rest, write a snapshot.

Small files: encrypted one by one (convergent) into the aggregator, which
codes bundles and fills one tar per destination node; each sealed tar is one
STORE. Large files: one segment in flight per file, the next one prepared in
the pool meanwhile (a window of two: measured in tools/bench). Everything that
lands is written to the local index as it lands, so an interrupted run can
be run again and sends only what is missing.
"""
import hashlib
import logging
import os
import threading
import time

import blake3
import zfec
from twisted.internet import defer
from twisted.python.failure import Failure

from aggregator.aggregator import Aggregator
from aggregator.policy import FlushPolicy
from flud.client import manifest as manifests
from flud.client.scan import scan
from flud.client.gather import settle_all
from flud.client.segments import challenges_for, prepare_segment, store_segment
from flud.coding import SegmentCoder
from flud.crypto import content_digest, convergent_key, encrypt_ctr
from flud.protocol.messages import KIND_ARCHIVE

log = logging.getLogger("flud.client")

SMALL_BATCH = 256            # small files prepared per pool call...
SMALL_BATCH_BYTES = 4 * 1024 * 1024   # ...or this many bytes, whichever first
LARGE_FILES_AT_ONCE = 3      # large files uploading at once (each with its window)
# Segments of one file held at once (prepared or in flight). One 2 MiB
# segment at 4-of-8 holds 2 MiB of ciphertext + 2 MiB of parity: the 4 MiB
# per transfer. Measured here (4029-file home, 50 nodes): 2 MiB x 1 is 12%
# faster than 1 MiB x 2 at the same footprint, because every STORE costs the
# node a fixed ~1 ms and half as many STOREs carry the same bytes; the CPU
# stays busy across files (LARGE_FILES_AT_ONCE) instead of within one.
SEGMENT_WINDOW = 1
MAX_TARS_IN_FLIGHT = 16
EMPTY = {"t": "E", "size": 0}


class FileChanged(Exception):
    pass


def _read_small(entry):
    with open(entry.path, "rb") as f:
        data = f.read(entry.size + 1)
    st = os.stat(entry.path)
    if len(data) != entry.size or st.st_mtime_ns != entry.mtime_ns:
        raise FileChanged(f"{entry.path} changed while it was read")
    return data


def _prepare_small_batch(secret, batch):
    """[(entry, content_id, key, ciphertext | None, error)] — off the reactor."""
    out = []
    for entry in batch:
        try:
            data = _read_small(entry)
        except (OSError, FileChanged) as err:
            out.append((entry, None, None, None, _why(err)))
            continue
        digest = content_digest(data)
        key = convergent_key(secret, digest)
        out.append((entry, digest.hex(), key, encrypt_ctr(key, data), None))
    return out


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


class Backup:
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
        self.policy = FlushPolicy(small_file_limit=cfg["small_file_limit"])
        self.coder = SegmentCoder(self.k, self.n)
        self.window = cfg.get("segment_window", SEGMENT_WINDOW)
        self.parallel_files = parallel_files or LARGE_FILES_AT_ONCE
        # ciphertext (the k primary shares are views of it) + n-k parity shares
        self.segment_footprint = self.segment_size + self.coder.block_length(
            self.segment_size) * (self.n - self.k)
        self.counters = {"bytes_sent": 0, "stores": 0, "tars": 0, "bytes_read": 0}
        self.summary = {"new": 0, "changed": 0, "unchanged": 0, "skipped": 0, "dedup": 0}
        self.skipped = []
        self._new_contents = {}     # content id -> record, this run
        self._pending_small = {}    # content id -> file key hex, waiting for its bundle
        self._bundles = {}          # bundle id hex -> record
        self._challenges = {}
        self._tars_in_flight = []
        self._tar_slots = defer.DeferredSemaphore(MAX_TARS_IN_FLIGHT)
        # The aggregator is filled in a worker and drained on the reactor.
        self._aggregator_lock = threading.Lock()
        self._sealed = []

    # ---- the run --------------------------------------------------------------

    @defer.inlineCallbacks
    def run(self, paths, excludes=()):
        started = self.clock()
        found = scan(paths, excludes)
        for path, why in found.skipped:
            self._skip(path, why)
        states = self.index.file_states()
        known = self.index.known_contents()
        files, unchanged_rows = [], []
        content_of = {}
        for entry in found.files:
            state = states.get(entry.path)
            if state and state[:4] == (entry.size, entry.mtime_ns, entry.ctime_ns, entry.inode) \
                    and state[4] in known:
                content_of[entry.path] = state[4]
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
        yield settle_all([self._all_small(small, content_of, known),
                          self._all_large(large, content_of, known)])
        with self._aggregator_lock:
            self.aggregator.flush()
        self._send_sealed()
        yield settle_all(self._tars_in_flight)
        self._finish_bundles()
        self._save_contents()
        self.index.record_files(
            (e.path, e.size, e.mtime_ns, e.ctime_ns, e.inode, content_of[e.path])
            for e in found.files if e.path in content_of)
        entries = manifests.entries_for(found, content_of, paths)
        snapshot = yield manifests.publish(self, entries, paths, started)
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
            return [nid.hex() for nid in self.network.place(bundle_id, count)]

        return Aggregator(self.policy, k, n, encode=encode,
                          hash=lambda b: blake3.blake3(b).digest(), place=place,
                          clock=self.clock, spares=2)

    @defer.inlineCallbacks
    def _all_small(self, small, content_of, known):
        for batch in _batches(small):
            leftover = yield self.pool.run(self._aggregate, batch, None, content_of, known)
            self._send_sealed()
            while leftover:
                if not self._tars_in_flight:  # nothing will drain: seal what is open
                    with self._aggregator_lock:
                        self.aggregator.flush()
                    self._send_sealed()
                yield self._wait_one_tar()
                leftover = yield self.pool.run(self._aggregate, None, leftover, content_of, known)
                self._send_sealed()

    def _aggregate(self, batch, prepared, content_of, known):
        """In a worker: read, encrypt and aggregate small files; what does not
        fit under the aggregator's memory bound comes back to wait for tars."""
        if prepared is None:
            prepared = _prepare_small_batch(self.home.secret, batch)
        with self._aggregator_lock:
            for i, (entry, content_id, key, ciphertext, error) in enumerate(prepared):
                if error is not None:
                    self.reactor.callFromThread(self._skip, entry.path, error)
                    continue
                if self.aggregator.must_drain():
                    return prepared[i:]
                content_of[entry.path] = content_id
                self.counters["bytes_read"] += entry.size
                self.reactor.callFromThread(self.progress.file_done, entry.size)
                if content_id in known or content_id in self._new_contents \
                        or content_id in self._pending_small:
                    self.summary["dedup"] += 1
                    continue
                self._pending_small[content_id] = (key.hex(), entry.size)
                self.aggregator.add(content_id, ciphertext)
            self._sealed.extend(self.aggregator.take_sealed())
        return None

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
            self.network.mark_failed(node_id)
            with self._aggregator_lock:
                moves = self.aggregator.replace(tar)
            self._apply_moves(moves)
            self._send_sealed()
            return
        with self._aggregator_lock:
            self.aggregator.confirm(tar)
        self.counters["bytes_sent"] += len(tar.data)
        self.counters["stores"] += 1
        self.counters["tars"] += 1
        self._collect_bundles()

    def _collect_bundles(self):
        with self._aggregator_lock:
            records = self.aggregator.take_bundles()
        for record in records:
            self._bundles[record.bundle_id.hex()] = {
                "len": record.length, "k": record.k, "n": record.n, "bl": record.block_length,
                "shares": [[s.index, s.key.hex(), s.node] for s in record.shares],
                "files": [[f.file_id, f.offset, f.length] for f in record.files]}

    def _apply_moves(self, moves):
        self._collect_bundles()
        for move in moves:
            bundle = self._bundles.get(move.bundle_id.hex())
            if bundle is None:
                continue
            for share in bundle["shares"]:
                if share[0] == move.index:
                    share[2] = move.to_node

    def _finish_bundles(self):
        self._collect_bundles()
        for bundle_id, bundle in self._bundles.items():
            for content_id, offset, length in bundle.pop("files"):
                key_hex, size = self._pending_small.pop(content_id)
                self._new_contents[content_id] = {"t": "S", "size": size, "key": key_hex,
                                                  "b": bundle_id, "o": offset, "l": length}

    # ---- large files --------------------------------------------------------------

    @defer.inlineCallbacks
    def _large(self, entry, known):
        """Segments go out through a window of SEGMENT_WINDOW (one by default:
        the next segment is read once the last one landed; several large files
        run at once, so the CPU and the nodes' round trips still overlap).
        Each landed segment is recorded at once."""
        transfer = self.monitor.transfer("upload", entry.path)
        segments = {}
        digests = []
        window = defer.DeferredSemaphore(self.window)
        sending = []
        try:
            with open(entry.path, "rb") as f:
                while True:
                    yield window.acquire()
                    if any(d.called and isinstance(d.result, Failure) for d in sending):
                        window.release()
                        break  # a segment failed: stop reading, report below
                    # The process budget, shared by every transfer: when it is
                    # spent this waits instead of growing memory.
                    yield transfer.reserve(self.segment_footprint, "segment")
                    prep = yield self.pool.run(self._read_prepare, f)
                    if prep is None:
                        transfer.unreserve(self.segment_footprint, "segment")
                        window.release()
                        break
                    index = len(digests)
                    digests.append(prep.digest)
                    self.counters["bytes_read"] += prep.length
                    landed = self.index.segment(prep.key.hex())
                    if landed is not None:  # sent by an earlier (interrupted) run
                        segments[index] = landed
                        transfer.unreserve(self.segment_footprint, "segment")
                        window.release()
                        self.progress.bytes_done(prep.length)
                        continue
                    # maybeDeferred: a refusal at the start (too few nodes) must
                    # also wait below for the segment already in flight
                    d = defer.maybeDeferred(store_segment, self.network, prep, self.n,
                                            self.counters, self.reactor)
                    d.addCallback(self._segment_landed, prep, index, segments)
                    d.addBoth(self._segment_done, prep, window, transfer)
                    sending.append(d)
                yield settle_all(sending)
            st = os.stat(entry.path)
            if st.st_mtime_ns != entry.mtime_ns or st.st_size != entry.size:
                raise FileChanged(f"{entry.path} changed while it was backed up")
        finally:
            transfer.close()
        content_id = "L" + hashlib.sha256(b"".join(digests)).hexdigest()
        self.progress.file_done(0)
        if content_id in known or content_id in self._new_contents:
            self.summary["dedup"] += 1
            return content_id
        return self._remember(content_id, {"t": "L", "size": entry.size,
                                           "segs": [segments[i] for i in range(len(digests))]})

    def _segment_landed(self, shares, prep, index, segments):
        record = [prep.key.hex(), prep.length, prep.block_length, shares]
        segments[index] = record
        self._challenges.update(prep.challenges)
        self.index.add_segment(prep.key.hex(), record)
        self.progress.bytes_done(prep.length)

    def _segment_done(self, result, prep, window, transfer):
        transfer.unreserve(self.segment_footprint, "segment")
        window.release()
        return result

    def _read_prepare(self, f):
        # Read into a buffer that is then encrypted in place (prepare_segment).
        data = bytearray(self.segment_size)
        got = f.readinto(data)
        if not got:
            return None
        if got < len(data):
            del data[got:]
        return prepare_segment(self.home.secret, self.coder, data)

    def _remember(self, content_id, record):
        self._new_contents[content_id] = record
        return content_id

    def _save_contents(self):
        self.index.add_bundles(self._bundles.items())
        self.index.add_contents(self._new_contents.items())
        if self._challenges:
            stored = self.index.get_meta("challenges", {})
            stored.update(self._challenges)
            self.index.set_meta("challenges", stored)

    def _skip(self, path, why):
        self.summary["skipped"] += 1
        self.skipped.append((path, why))
        self.progress.warn(f"skipped {path}: {why}")


def _tar_challenges(secret, tar):
    view = memoryview(tar.data)
    return {m.member_key.hex(): challenges_for(secret, m.member_key,
                                                view[m.data_offset:m.data_offset + m.length])
            for m in tar.members}
