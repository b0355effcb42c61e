"""A check run, and its repair: the thin Twisted part over the pure cores.

Given the objects (k-of-n, their holders as the holder map names them) and
an INetwork, a run
1. challenges (VERIFY) the shares of this run's part of the rotation, plus
   one share of every holder node not otherwise asked (so each run knows
   every node's reachability), and downloads and hash-checks the shares of
   the objects the data subset picks;
2. records what it saw in the HealthBook and classifies every object;
3. with repair on, for each object below m: fetches k healthy shares
   (each checked against its key), re-codes only the lost indexes in the
   CPU pool, places them (plan.py) and stores them: bundle shares bound for
   one node as one tar STORE, extent streams one STORE each. A store that
   fails goes to another node, at most STORE_ATTEMPTS times.
4. returns the new holder rows per object, also kept in the CheckState
   until the caller has written them into a map page (state.recorded()).

Nothing here reads wall time: `now` is the injected clock's (the reactor's
by default, a task.Clock in tests; the CLI passes the wall clock, which
FLUD_NOW can fix to simulate days of checks). A request unanswered for REQUEST_TIMEOUT (a stalled node) counts as
unreachable, as does a refused or dropped connection.
"""
import random
from typing import NamedTuple, Optional

from twisted.internet import defer

from flud.client.gather import gather
from flud.client.records import ShareHolder
from flud.client.repair.answers import Probe, outcome_of  # noqa: F401 (Probe: callers' type)
from flud.client.repair.object_health import (
    CLASSES, CORRUPT, HEALTHY, LOST, OK, UNAVAILABLE, UNREACHABLE, Observation, RepairPolicy,
    object_class)
from flud.client.repair.repair_plan import BUNDLE, by_node, place
from flud.client.repair.retire import retiring
from flud.client.repair.recode import recode, share_key
from flud.client.repair.rotation import WEEK, plan_run, select_objects, slot
from flud.client.repair.check_state import CheckState
from flud.client.repair.stream_repair import CHUNK as STREAM_CHUNK, repair_streamed
from flud.client.repository.bundle_sender import share_tar
from flud.coding import SegmentCoder
from flud.protocol.messages import KIND_ARCHIVE, KIND_SHARE

IN_FLIGHT = 64            # challenges at once (small answers: a digest)
DOWNLOADS_IN_FLIGHT = 4   # whole shares being downloaded to check (an extent's is 8 MiB)
REPAIR_IN_FLIGHT = 4      # objects being fetched and re-coded at once
REPAIR_BATCH = 16         # objects re-coded before their shares are sent together
REQUEST_TIMEOUT = 60.0    # a node silent this long on a challenge or fetch: unreachable
STORE_TIMEOUT = 300.0
STORE_ATTEMPTS = 3

REPAIRED = "repaired"


class ObjectResult(NamedTuple):
    health: object                # ObjectHealth as this run found it
    repaired: tuple = ()          # indexes stored on new nodes this run
    error: Optional[str] = None   # why a needed repair did not (fully) happen
    n: int = 0                    # the object's n (0: not known, as health's count)
    unplaced: int = 0             # shares no node could take (fewer nodes than n answer)

    @property
    def confirmed(self) -> int:
        """Confirmed shares after this run's repair (a re-created share is
        confirmed: it was stored under its key just now)."""
        return self.health.healthy + len(self.repaired)

    @property
    def state(self) -> str:
        """REPAIRED (all it needed was made), or the health class after this
        run's repair: an object raised only part of the way (fewer nodes
        than n) is reported by what it has now, never by what it had."""
        if self.repaired and not self.error:
            return REPAIRED
        if not self.repaired or not self.n:
            return self.health.state
        left = self.confirmed + self.health.unreachable - len(
            set(self.repaired) & set(self.health.at_risk))
        return object_class(self.health.k, self.n, self.confirmed, left)


class CheckReport(NamedTuple):
    objects: list                 # [ObjectResult]
    nodes: list                   # [NodeReport]
    moved: dict                   # {object id: [(index, share key, new node)]}
    challenged: int
    downloaded: int
    window: float                 # the part of the cycle this run covered
    recreated_shares: int
    recreated_bytes: int
    fetched_bytes: int
    surplus: list                 # [(object id, share key, node)]: prune may delete

    def counts(self) -> dict:
        out = dict.fromkeys(CLASSES + (REPAIRED,), 0)
        for result in self.objects:
            out[result.state] += 1
        return out

    def unreadable(self) -> int:
        """Objects a restore could not read now (unavailable or lost)."""
        counts = self.counts()
        return counts[UNAVAILABLE] + counts[LOST]

    def summary(self) -> dict:
        """The run as plain JSON values (`flud check --json`, the status page)."""
        return {
            "counts": self.counts(),
            "window": self.window, "challenged": self.challenged,
            "downloaded": self.downloaded,
            "recreated": {"shares": self.recreated_shares, "bytes": self.recreated_bytes},
            "fetched_bytes": self.fetched_bytes,
            "objects": [{"id": r.health.object_id, "state": r.state,
                         "healthy": r.health.healthy, "unreachable": r.health.unreachable,
                         "lost": list(r.health.lost), "repaired": list(r.repaired),
                         "confirmed": r.confirmed, "n": r.n, "unplaced": r.unplaced,
                         "error": r.error}
                        for r in self.objects if r.state != HEALTHY],
            "nodes": [{"node": n.node, "reachable": n.reachable,
                       "unreachable_since": n.unreachable_since, "shares": n.shares,
                       "ok": n.ok, "corrupt": n.corrupt, "missing": n.missing,
                       "surplus": n.surplus} for n in self.nodes],
            "moved": {oid: [list(row) for row in rows] for oid, rows in self.moved.items()},
            "surplus": [list(row) for row in self.surplus],
        }


class CheckJob:
    """One run. challenge_of(share) -> Probe or None, asked by the share's
    key (a surplus copy comes with index -1; None: the share is downloaded
    and hash-checked instead); run_cpu(fn, *args) -> Deferred
    (the job's CPU pool); on_progress(state) is called whenever the state
    changed in a way worth saving (after each repaired object); clock() -> the
    present in Unix seconds for the rotation and the health book (default:
    the reactor's), while timeouts always run on the reactor."""

    def __init__(self, reactor, network, state: CheckState, challenge_of, run_cpu,
                 policy: RepairPolicy = RepairPolicy(), cycle: float = WEEK,
                 interval: Optional[float] = None, rng: random.Random = None,
                 on_progress=None, timeout: float = REQUEST_TIMEOUT,
                 store_timeout: float = STORE_TIMEOUT, stream_chunk: int = STREAM_CHUNK,
                 clock=None, trust=None):
        self.reactor, self.network, self.state = reactor, network, state
        self.clock = clock or reactor.seconds
        self.challenge_of, self.run_cpu = challenge_of, run_cpu
        self.policy, self.cycle, self.interval = policy, cycle, interval
        self.rng = rng or random.Random()
        self.on_progress = on_progress or (lambda state: None)
        self.timeout, self.store_timeout = timeout, store_timeout
        self.stream_chunk = stream_chunk
        # client/trust_view.py: told what the challenges found (reputation),
        # asked which nodes to move data off and where shares may go (the
        # network's own, where it has one)
        self.trust = trust if trust is not None else getattr(network, "trust", None)
        self._groups = None   # {node hex: diversity group} while a repair runs
        self._coders = {}
        self._short = {}   # object id -> indexes no node could take this run
        self._slots = defer.DeferredSemaphore(IN_FLIGHT)
        self._downloads = defer.DeferredSemaphore(DOWNLOADS_IN_FLIGHT)
        self.counters = {"recreated_shares": 0, "recreated_bytes": 0, "fetched_bytes": 0}

    def now(self) -> float:
        return self.clock()

    def _coder(self, k: int, n: int) -> SegmentCoder:
        if (k, n) not in self._coders:
            self._coders[k, n] = SegmentCoder(k, n)
        return self._coders[k, n]

    def request(self, method, node_hex: str, *args):
        """Deferred: method(node id, *args), one of the network's typed
        requests (network.retrieve, network.store, ...); a raise fails it."""
        return defer.maybeDeferred(method, bytes.fromhex(node_hex), *args)

    def open_store(self, node_hex: str, size: int):
        d = defer.maybeDeferred(self.network.open_store, bytes.fromhex(node_hex), size)
        return self.timed(d, self.store_timeout)

    def timed(self, d, timeout: float):
        """d, failed with TimeoutError (counted unreachable) after `timeout`."""
        return d.addTimeout(timeout, self.reactor)

    def _call(self, node_hex: str, timeout: float, method, *args):
        return self.timed(self.request(method, node_hex, *args), timeout)

    # --- checking -----------------------------------------------------------

    @defer.inlineCallbacks
    def run(self, objects, repair: bool = False, subset=None):
        state, book = self.state, self.state.book
        objects = [state.current(obj) for obj in objects]
        window, rotation = plan_run(state.rotation, self.now(), self.cycle, self.interval)
        download = select_objects([o.object_id for o in objects], subset, self.rng)
        asked, fetched = self._shares_to_ask(objects, download, window)
        runs = [self._slots.run(self._challenge, s) for s in asked]
        runs += [self._downloads.run(self._download, s) for s in fetched]
        seen = [observation for ok, observation in (yield gather(runs)) if ok]
        # A node that answered anything this run is reachable, whatever
        # else timed out on it: the unanswered ones are recorded first.
        for observation in sorted(seen, key=lambda o: o.outcome != UNREACHABLE):
            book.observe(observation)
            if self.trust is not None:
                self.trust.observed(bytes.fromhex(observation.node), observation.outcome)
        # A node that answered nothing this run is failed for the rest of it:
        # the repair's stores and the map page's bundle go to others at once
        # instead of each finding it down (and running out of spares).
        answered = {o.node for o in seen if o.outcome != UNREACHABLE}
        for node in sorted({o.node for o in seen} - answered):
            self.network.mark_failed(bytes.fromhex(node), "did not answer this check")
        state.rotation = rotation
        self.on_progress(state)
        now = self.now()
        healths = [book.classify(obj, now, self.policy) for obj in objects]
        results = {obj.object_id: ObjectResult(h, n=obj.n) for obj, h in zip(objects, healths)}
        # Nodes as this check found them (before repairs move shares off
        # them), with the surplus copies counted after this run's repairs.
        found = book.node_reports(objects, now, self.policy.grace)
        if repair:
            yield self._repair(objects, healths, results)
        surplus = {}
        for _key, node in book.superseded:
            surplus[node] = surplus.get(node, 0) + 1
        nodes = [r._replace(surplus=surplus.get(r.node, 0)) for r in found]
        return CheckReport([results[o.object_id] for o in objects], nodes,
                           {oid: rows for oid, rows in state.moved.items()},
                           len(asked), len(fetched), window.fraction,
                           self.counters["recreated_shares"], self.counters["recreated_bytes"],
                           self.counters["fetched_bytes"], book.surplus())

    def _shares_to_ask(self, objects, download, window) -> tuple:
        """(the shares to challenge, the shares to download whole) this run:
        the objects picked for download whole, the shares whose slot is in
        this run's window, one share of every other holder node, and one
        moved share of each node that held some."""
        book = self.state.book
        asked, fetched, reached = [], [], set()
        for obj in objects:
            whole = obj.object_id in download
            for share in obj.shares:
                if whole:
                    fetched.append(share)
                elif window.contains(slot(share.key)):
                    asked.append(share)
                else:
                    continue
                reached.add(share.node)
        for obj in objects:   # every holder node is asked something each run
            for share in obj.shares:
                if share.node not in reached:
                    reached.add(share.node)
                    asked.append(share)
        for (key, node), _ in sorted(book.superseded.items()):
            if node not in reached:   # a node that held moved shares: back? still there?
                reached.add(node)
                asked.append(ShareHolder(-1, key, node))
        return asked, fetched

    @defer.inlineCallbacks
    def _challenge(self, share):
        probe = self.challenge_of(share)
        if probe is None:   # nothing recorded to ask: download it and check its key
            return (yield self._downloads.run(self._download, share))
        try:
            digest = yield self._call(share.node, self.timeout, self.network.verify,
                                      bytes.fromhex(share.key), probe.nonce, probe.offset,
                                      probe.length)
        except Exception as err:
            return Observation(share.key, share.node, outcome_of(err), self.now())
        good = bytes(digest[:len(probe.digest)]) == probe.digest
        return Observation(share.key, share.node, OK if good else CORRUPT, self.now())

    @defer.inlineCallbacks
    def _download(self, share):
        _, outcome = yield self._fetch(share, keep=False)
        return Observation(share.key, share.node, outcome, self.now())

    @defer.inlineCallbacks
    def _fetch(self, share, keep: bool = True):
        """(bytes or None, outcome): the whole share, checked against its key
        (and let go at once unless `keep`)."""
        try:
            data = yield self._call(share.node, self.timeout, self.network.retrieve,
                                    bytes.fromhex(share.key))
        except Exception as err:
            return None, outcome_of(err)
        self.counters["fetched_bytes"] += len(data)
        if share_key(data) != share.key:
            return None, CORRUPT
        return (data if keep else None), OK

    # --- repair ---------------------------------------------------------------

    @defer.inlineCallbacks
    def _repair(self, objects, healths, results):
        book = self.state.book
        away = set(book.unreachable_since)
        candidates = [nid.hex() for nid in self.network.alive_ids()
                      if nid.hex() not in away]
        load = {}
        for obj in objects:
            for share in obj.shares:
                load[share.node] = load.get(share.node, 0) + 1
        if self.trust is not None:
            self._groups = self.trust.groups(self.network.nodes)
            healths = retiring(self.trust, objects, healths, candidates)
        todo = [(obj, h) for obj, h in zip(objects, healths) if h.to_recreate()]
        limit = defer.DeferredSemaphore(REPAIR_IN_FLIGHT)
        for batch in _batches(todo):
            yield self._repair_batch(batch, candidates, load, limit, results)

    @defer.inlineCallbacks
    def _repair_batch(self, batch, candidates, load, limit, results):
        """Re-create what the (object, health) pairs of one batch miss:
        extents of known length streamed a range at a time, the rest
        fetched whole and recoded, then stored (one tar per node for
        bundles); results updated."""
        made, wanted, landed = {}, {}, {}
        objects_by_id = {obj.object_id: obj for obj, _ in batch}
        for obj, health in batch:
            # An index the map names no holder for has no known key to
            # re-create it under: it counts as lost, but is not made here.
            wanted[obj.object_id] = self._placeable(
                obj, set(health.to_recreate()) & {s.index for s in obj.shares}, candidates)
        for obj, _ in batch:   # no node can take any of its shares: said, not fetched
            if not wanted[obj.object_id]:
                self._record(obj, {}, self._short.get(obj.object_id, set()), results)
        # Extents of known length a range at a time, several at once;
        # what that could not land goes the whole-share way below.
        streams = [obj for obj, _ in batch if obj.kind != BUNDLE and obj.share_length
                   and wanted[obj.object_id]]
        outcomes = yield gather([repair_streamed(self, obj, wanted[obj.object_id],
                                                 candidates, load, self.stream_chunk)
                                 for obj in streams])
        for obj, (ok, value) in zip(streams, outcomes):
            if not ok:
                value.raiseException()
            landed[obj.object_id], wanted[obj.object_id] = value
        todo_now = [obj for obj, _ in batch if wanted[obj.object_id]]
        outcomes = yield gather([limit.run(self._recode, obj, wanted[obj.object_id])
                                 for obj in todo_now])
        for obj, (ok, value) in zip(todo_now, outcomes):
            if ok and isinstance(value, dict):
                made[obj.object_id] = (obj, value, landed.pop(obj.object_id, {}))
            else:
                error = value if ok else value.getErrorMessage()
                # the fetch saw what the challenges did not (a share
                # confirmed earlier and gone since): the object is
                # reported as the book has it now, not as it was believed
                # (seed 70055: "at risk" while a restore could not read it)
                health = self.state.book.classify(obj, self.now(), self.policy)
                results[obj.object_id] = results[obj.object_id]._replace(
                    health=health, error=error)
        for object_id, done in landed.items():   # all streamed, or the rest failed
            self._record(objects_by_id[object_id], done, self._short.get(object_id, set()),
                         results)
        if made:
            yield self._store(made, candidates, load, results)

    def _placeable(self, obj, wanted: set, candidates) -> set:
        """The part of `wanted` that nodes answering and holding none of
        the object can take (the lowest indexes); the rest is kept in
        self._short, reported, and not fetched for: with fewer nodes than
        n, an object is raised as far as they allow."""
        taken = obj.holder_nodes()
        free = sum(1 for node in candidates if node not in taken)
        keep = set(sorted(wanted)[:free])
        if len(keep) < len(wanted):
            self._short[obj.object_id] = wanted - keep
        return keep

    @defer.inlineCallbacks
    def _recode(self, obj, wanted):
        """{index: bytes} of the shares to re-create (indexes `wanted`, and
        any source found bad on the way), or why not (a str)."""
        book, now = self.state.book, self.now()
        wanted = set(wanted)
        sources = [s for s in sorted(obj.shares)
                   if s.index not in wanted
                   and book.share_state(s, now, self.policy.grace) == OK]
        fetched = {}
        while len(fetched) < obj.k and sources:
            take, sources = sources[:obj.k - len(fetched)], sources[obj.k - len(fetched):]
            answers = yield gather([self._fetch(s) for s in take])
            for share, (_, (data, outcome)) in zip(take, answers):
                book.observe(Observation(share.key, share.node, outcome, self.now()))
                if data is not None:
                    fetched[share.index] = data
                else:
                    wanted.add(share.index)
        if len(fetched) < obj.k:
            return (f"only {len(fetched)} of the {obj.k} shares needed could be fetched; "
                    f"waiting for holders to return")
        keys = {s.index: s.key for s in obj.shares}
        lost = {index: keys[index] for index in wanted if index in keys}
        made = yield self.run_cpu(recode, self._coder(obj.k, obj.n), fetched, lost)
        return made

    @defer.inlineCallbacks
    def _store(self, made, candidates, load, results):
        """Place and store every re-created share of `made` ({object id:
        (object, {index: bytes})}); record what landed."""
        pending = {oid: set(shares) for oid, (obj, shares, _) in made.items()}
        landed = {oid: dict(before) for oid, (_, _, before) in made.items()}
        # never on a node that took one of its streams a moment ago (streams.py)
        avoid = {oid: {p.node for p in before.values()} for oid, (_, _, before) in made.items()}
        for _ in range(STORE_ATTEMPTS):
            wanted = [(made[oid][0], sorted(idx)) for oid, idx in pending.items() if idx]
            if not wanted:
                break
            placed, _ = place(wanted, candidates, load, avoid, self._groups)
            sends, groups = [], []
            for p in placed:
                avoid[p.object_id].add(p.node)   # never two shares of one object on a node
            bundles = [p for p in placed if made[p.object_id][0].kind == BUNDLE]
            for node, group in by_node(bundles).items():
                sends.append(self._send_tar(node, group, made))
                groups.append(group)
            for p in placed:
                if made[p.object_id][0].kind != BUNDLE:
                    data = made[p.object_id][1][p.index]
                    sends.append(self._call(p.node, self.store_timeout, self.network.store,
                                            bytes.fromhex(p.key), data, KIND_SHARE))
                    groups.append([p])
            for group, (ok, value) in zip(groups, (yield gather(sends))):
                node = group[0].node
                if not ok:
                    load[node] = load.get(node, 0) - len(group)
                    self.network.blame(bytes.fromhex(node), value.value)
                    continue
                for p in group:
                    pending[p.object_id].discard(p.index)
                    landed[p.object_id][p.index] = p
                    size = len(made[p.object_id][1][p.index])
                    self.counters["recreated_shares"] += 1
                    self.counters["recreated_bytes"] += size
        for oid, (obj, _, _) in made.items():
            self._record(obj, landed[oid], pending[oid] | self._short.get(oid, set()), results)

    def _send_tar(self, node: str, group, made):
        key, data = share_tar((p.key, made[p.object_id][1][p.index]) for p in group)
        return self._call(node, self.store_timeout, self.network.store, key, data, KIND_ARCHIVE)

    def _record(self, obj, landed: dict, unplaced: set, results) -> None:
        book = self.state.book
        if landed:
            old = {s.index: s for s in obj.shares}
            rows = sorted((p.index, p.key, p.node) for p in landed.values())
            for index, _key, node in rows:
                book.moved(obj.object_id, old[index], node)
            self.state.record_move(obj.object_id, rows)
            self.on_progress(self.state)
        error = (f"shares {sorted(unplaced)} found no node to take them: redundancy "
                 f"reduced until more nodes answer"
                 if unplaced else results[obj.object_id].error)
        results[obj.object_id] = results[obj.object_id]._replace(
            repaired=tuple(sorted(landed)), error=error, unplaced=len(unplaced))


def _batches(todo) -> list:
    """The (object, health) pairs to repair, in batches: bundles (shares of
    a MiB or less) REPAIR_BATCH at a time, so one tar per node carries
    many; extents of known length REPAIR_IN_FLIGHT at a time (streamed a
    range at a time); an extent fetched whole (its length unknown) alone,
    so memory holds at most k fetched and n - k made streams."""
    bundles = [item for item in todo if item[0].kind == BUNDLE]
    ranged = [item for item in todo if item[0].kind != BUNDLE and item[0].share_length]
    batches = [bundles[i:i + REPAIR_BATCH] for i in range(0, len(bundles), REPAIR_BATCH)]
    batches += [ranged[i:i + REPAIR_IN_FLIGHT]
                for i in range(0, len(ranged), REPAIR_IN_FLIGHT)]
    batches += [[item] for item in todo
                if item[0].kind != BUNDLE and not item[0].share_length]
    return batches
