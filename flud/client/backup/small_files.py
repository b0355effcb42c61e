"""A backup's small files: read, compressed if that saves enough and
encrypted one by one (convergent: flud/client/repository/small_contents.py), and
added to the aggregator in a worker, which codes bundles and fills one tar
per destination node; each sealed tar is one STORE, sent from the reactor.

Memory (the whole budget: see client/budget_plan.py): each pool call first reserves the
most the aggregator may grow by (a free-standing "credit": about one
bundle's shares, see Aggregator.add_cost) and, on the open bundle (kind
"bundle"), the file being read and compressed and the parity of a bundle
being coded ("work"). Afterwards what the aggregator holds is attributed to
the open bundle ("building") and to one transfer per tar (kind "tar",
"building" then "sealed" until its node answered), and the rest goes back. When a
reservation has to wait and no tar is on its way, open tars are sealed and
sent, so memory comes back.

SmallFiles is a part of the backup run (backup_job.py): it is given the
job's context, the run's content log and tallies, and nothing else of the
run. Bundles, tars and their memory are the bundle sender's
(repository/bundle_sender.py), which it extends with the file reading.
The tallies are written on the reactor thread only: a worker returns its
counts with its result.
"""
from twisted.internet import defer

from flud.client.backup.file_reading import FileChanged, read_small, why_skipped
from flud.client.gather import settle_all
from flud.client.records import SmallContent
from flud.client.repository.bundle_sender import SMALL_BATCH, SMALL_BATCH_BYTES, BundleSender
from flud.client.repository.small_contents import seal_small
from flud.crypto import content_digest, convergent_key


LANES = 2   # small-file batches in the pool at once (this machine's cores: two)


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


class SmallFiles(BundleSender):
    """contents: the run's ContentLog; counters and summary: the run's
    tallies; skip(path, why): a file that could not be read (called on the
    reactor). plan: the run's BudgetPlan (client/budget_plan.py), so the
    aggregator's own bound leaves room for the large files of the same run."""

    def __init__(self, ctx, small_file_limit, plan, contents, counters, summary, skip):
        super().__init__(ctx, small_file_limit, plan, counters, summary)
        self.contents = contents
        self._skip = skip
        self._pending_small = {}    # content id -> (key hex, size, method), waiting for its bundle

    def file_landed(self, content_id, bundle_id, offset, length) -> None:
        key_hex, size, method = self._pending_small.pop(content_id)
        self.contents.remember(content_id, SmallContent(size, key_hex, bundle_id,
                                                        offset, length, method))

    @defer.inlineCallbacks
    def send_all(self, small, content_of):
        """LANES loops take the batches in turn: one reads, hashes,
        compresses and encrypts in a worker while the other does (the GIL is
        let go in hashlib, zstd and OpenSSL's AES for all but the smallest
        buffers), so the client's small-file work runs on both cores; the
        aggregator is theirs in turn (its lock). Each lane reserves its own
        credit and work: memory follows the lanes, still bounded."""
        batches = _batches(small)
        failed = []   # a lane that failed stops the others at their next batch
        yield settle_all([self._lane(batches, content_of, failed) for _ in range(LANES)])
        # No more small files: what is open goes out now, not after the large
        # files (which may be waiting for the budget these tars hold).
        with self._aggregator_lock:
            self.aggregator.flush()
        self._account_small()
        self._send_sealed()

    @defer.inlineCallbacks
    def _lane(self, batches, content_of, failed):
        try:
            yield self._lane_batches(batches, content_of, failed)
        except BaseException:
            failed.append(True)
            raise

    @defer.inlineCallbacks
    def _lane_batches(self, batches, content_of, failed):
        for batch in batches:   # one iterator, shared: each batch goes to one lane
            if failed:
                return
            while batch:
                with self._aggregator_lock:
                    tars = sum(1 for *_, sealed in self.aggregator.pending_tars().values()
                               if not sealed)
                    bundle = self.aggregator.bundle_bytes
                credit = self._credit_bytes(self.policy, sum(e.size for e in batch), bundle, tars)
                work = self._work_bytes(self.policy, max(e.size for e in batch))
                # Not `self._credit += (yield ...)`: that reads the credit before
                # the wait, and the other lane may give it all back meanwhile
                # (its _account_small with no call running): the sum would
                # count bytes no longer reserved.
                granted = yield self._reserve_small(work + credit)
                self._credit += granted
                self.ctx.monitor.hand_over(work, self._bundle_memory, "work")
                self._credit -= work
                self._small_calls += 1
                try:
                    batch, drain, dedup, read = yield self.ctx.pool.run(
                        self._aggregate, batch, credit, content_of)
                    self.summary["dedup"] += dedup
                    self.counters["bytes_read"] += read
                finally:
                    self._small_calls -= 1
                    self._account_small()
                self._send_sealed()
                if batch and drain:  # over the aggregator's own bound: let tars land
                    if not self._tars_in_flight:
                        with self._aggregator_lock:
                            self.aggregator.seal_open_tars()
                        self._account_small()
                        self._send_sealed()
                    yield self._wait_one_tar()

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
                    if content_id in self._pending_small:   # the other lane took it
                        dedup += 1
                        content_of[entry.path] = content_id
                        read += entry.size
                        done.append(entry.size)
                        continue
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
