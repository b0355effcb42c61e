"""Repairing an extent's share streams a range at a time (bounded memory).

An extent's stream is up to 8 MiB (32 MiB of segments over k). Fetched
whole, a repair holds k of them and the n - k it makes. zfec works byte by
byte, so the same range of any k streams gives that range of the lost ones:
here each step fetches CHUNK bytes of k streams (ranged RETRIEVE), re-codes
them in the pool and feeds the pieces into streamed STOREs opened on the new
holders, so memory holds 2k + (n - k) chunks whatever the stream's length (the
next range is fetched while one is coded and fed).
The stream's length must be known (StoredObject.share_length): a ranged
RETRIEVE past the end is refused.

The made streams are hashed as they go and each is finished under its
recorded key only if it matches; the sources are not checked one by one (a
range is not a whole share). So anything that goes wrong (a source gone or
wrong, a store refused) is left to the whole-share path (job.py), which
checks every source against its key and moves stores to other nodes: this
returns the indexes it did not land.
"""
import blake3
from twisted.internet import defer

from flud.client.gather import gather
from flud.client.repair.object_health import OK, Observation
from flud.client.repair.answers import outcome_of
from flud.client.repair.repair_plan import place

CHUNK = 1 << 20


@defer.inlineCallbacks
def repair_streamed(job, obj, wanted, candidates, load, chunk: int = CHUNK):
    """({index: Placement} landed, set of indexes left for the whole-share path)."""
    book, now = job.state.book, job.now()
    length = obj.share_length
    wanted = set(wanted)
    sources = [s for s in sorted(obj.shares) if s.index not in wanted
               and book.share_state(s, now, job.policy.grace) == OK]
    if len(sources) < obj.k or not length:
        return {}, wanted
    placed, _ = place([(obj, sorted(wanted))], candidates, load, groups=job._groups)
    stores = yield _open_stores(job, placed, length, load)
    pick = _Sources(job, sources[:obj.k], sources[obj.k:])
    coder = job._coder(obj.k, obj.n)
    offset, ahead = 0, None
    try:
        while stores and offset < length:
            size = min(chunk, length - offset)
            pieces = yield (ahead or pick.fetch(offset, size))
            ahead = None
            if offset + size < length:   # the next range travels while this one is coded
                ahead = pick.fetch(offset + size, min(chunk, length - offset - size))
            made = yield job.run_cpu(coder.recreate, pieces, sorted(stores))
            del pieces
            feeds, indexes = [], []
            for index, (p, store, hasher) in stores.items():
                hasher.update(made[index])
                feeds.append(job.timed(store.feed(bytes(made[index])), job.store_timeout))
                indexes.append(index)
            del made
            for index, (ok, value) in zip(indexes, (yield gather(feeds))):
                if not ok:
                    _drop(job, stores, index, value, load)
            offset += size
    except _Abandon:
        for index in list(stores):
            _drop(job, stores, index, None, load)
    if ahead is not None:   # stopped early: what is still on its way is not wanted
        ahead.addErrback(lambda _: None)
    landed = yield _finish_stores(job, stores, length, load)
    return landed, wanted - set(landed)


@defer.inlineCallbacks
def _open_stores(job, placed, length, load):
    """{index: (Placement, open store, its hasher)} of the placements a
    node took a streamed STORE for (the others blamed, their load given back)."""
    stores = {}
    opened = yield gather([job.open_store(p.node, length) for p in placed])
    for p, (ok, value) in zip(placed, opened):
        if ok:
            stores[p.index] = (p, value, blake3.blake3())
        else:
            load[p.node] -= 1
            job.network.blame(bytes.fromhex(p.node), value.value)
    return stores


@defer.inlineCallbacks
def _finish_stores(job, stores, length, load):
    """{index: Placement} of the streamed shares that hashed to their key
    and that their node took whole (counted as re-created)."""
    landed = {}
    finishing = [(index, p, store) for index, (p, store, hasher) in stores.items()
                 if hasher.hexdigest() == p.key]
    for index in set(stores) - {i for i, _, _ in finishing}:
        _drop(job, stores, index, None, load)   # a wrong source: the whole path finds it
    done = yield gather([job.timed(store.finish(bytes.fromhex(p.key)), job.store_timeout)
                         for _, p, store in finishing])
    for (index, p, _), (ok, value) in zip(finishing, done):
        if ok:
            landed[index] = p
            job.counters["recreated_shares"] += 1
            job.counters["recreated_bytes"] += length
        else:
            load[p.node] -= 1
            job.network.blame(bytes.fromhex(p.node), value.value)
    return landed


class _Sources:
    """The k sources ranges are fetched from, and spares to swap in for
    one that fails (one range is fetched at a time, so nothing races)."""

    def __init__(self, job, chosen, spare):
        self.job, self.chosen, self.spare = job, list(chosen), list(spare)

    @defer.inlineCallbacks
    def fetch(self, offset: int, size: int):
        """{index: bytes} of range [offset, offset+size) of k streams."""
        pieces, asking = {}, list(self.chosen)
        while asking:
            answers = yield gather([_range(self.job, share, offset, size) for share in asking])
            failed = [share for share, (_, data) in zip(asking, answers) if data is None]
            pieces.update((share.index, data) for share, (_, data) in zip(asking, answers)
                          if data is not None)
            if len(failed) > len(self.spare):
                raise _Abandon()
            asking = [self.spare.pop(0) for _ in failed]
            self.chosen = [share for share in self.chosen if share not in failed] + asking
        return pieces


class _Abandon(Exception):
    """Fewer than k sources answered a range: the whole-share path takes over."""


def _drop(job, stores, index, failure, load) -> None:
    p, store, _ = stores.pop(index)
    store.cancel()
    load[p.node] -= 1
    if failure is not None:
        job.network.blame(bytes.fromhex(p.node), failure.value)


@defer.inlineCallbacks
def _range(job, share, offset: int, size: int):
    try:
        data = yield job.timed(job.request(job.network.retrieve, share.node, bytes.fromhex(share.key),
                                        offset, size), job.timeout)
    except Exception as err:
        job.state.book.observe(Observation(share.key, share.node, outcome_of(err),
                                           job.now()))
        return None
    if len(data) != size:
        return None
    job.counters["fetched_bytes"] += size
    return bytes(data)
