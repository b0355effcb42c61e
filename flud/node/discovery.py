"""The node's part of the Kademlia DHT: its routing table, FIND_NODE answers,
joining, bucket refresh, and the table kept on disk.

Who enters the table: only a node this one verified reachable. A signed
record that checked (from a FIND_NODE answer, an asker's own record, the
gossip, the saved table) is a candidate; the node dials the address the
record names, expecting that record's key (TLS + HELLO prove the key
holder answers there), and PINGs it. Only then is it offered to the table
(flud/overlay/routing.py: k = 20 a bucket, oldest live contacts kept, at
most 2 of one global /24 or /48 a bucket and 10 a table). Probes are
bounded: MAX_QUEUED candidates wait, PROBES_AT_ONCE run, and an id probed
lately at an address is not probed there again for PROBE_AGAIN_AFTER, so a
flood of records costs a bounded queue and a bounded rate of dials (a node
that moved, or mapped a port after it was found unreachable, is probed at
its new address at once).

FIND_NODE answers are rate limited per asker and for everyone together
(token buckets); over the limit the answer is RATE_LIMITED, at once, and
costs a dictionary lookup. An answer names at most k records.

Everything timed runs on the injected clock (reactor): the refresh looks
up a random id in each bucket not looked up for REFRESH_INTERVAL.
"""
import logging
import os
from collections import OrderedDict, deque

from twisted.internet import defer

from flud.overlay.lookup import Lookup
from flud.overlay.routing import ALPHA, K, Contact, RoutingTable, subnet_of
from flud.protocol import messages, peer_file
from flud.protocol.codec import Op
from flud.protocol.errors import ConnectFailed, ErrorCode, RemoteError
from flud.protocol.find_node import QUERY_TIMEOUT, RecordChecker, drive
from flud.protocol.node_record import CLOCK_SLACK
from flud.protocol.ratelimit import TokenBucket

log = logging.getLogger("flud.dht")

PEERS_FILE = "peers.v1"
REFRESH_INTERVAL = 600.0          # libp2p kad-dht refreshes every 10 minutes
REFRESH_TICK = 60.0               # how often the refresh looks for stale buckets
REFRESH_BUCKETS_A_TICK = 4        # at most this many bucket lookups a tick
SAVE_INTERVAL = 300.0
JOIN_RETRY, JOIN_RETRY_MAX = 1.0, 30.0   # seconds between joins while none answers
MAX_QUEUED = 256                  # candidates waiting for their reachability probe
PROBES_AT_ONCE = 8
PROBE_AGAIN_AFTER = 600.0
PROBED_MEMORY = 4096              # ids whose last probe is remembered
# Once joined with a table of K contacts, the node needs no more in a hurry:
# the other candidates are probed at most SETTLED_PROBE_RATE a second (a
# handshake each way each). Without it every node of a crowd starting
# together dialled every record it heard of at once (~80 each in a
# 200-node testnet), and the crowd's start took all the CPU two cores had.
SETTLED_PROBE_RATE, SETTLED_PROBE_BURST = 1.0, 2.0
# FIND_NODE answered per asker and for all askers together (per second, burst).
# A client restoring a home may look up a few hundred holders in a burst;
# an answer costs ~0.2 ms (closest() and 20 records encoded), so the total
# caps FIND_NODE at about a tenth of a core.
PER_PEER_RATE, PER_PEER_BURST = 20.0, 200.0
ALL_RATE, ALL_BURST = 500.0, 1000.0
TRACKED_ASKERS = 1024             # askers whose bucket is kept (oldest forgotten)


def _peer_address(conn):
    try:
        peer = conn.transport.getPeer()
    except AttributeError:
        return None
    return (peer.host, peer.port)


class FindNodeQuota:
    """Token buckets on FIND_NODE: one per asker (bounded: the askers seen
    longest ago are forgotten first) and one for all. Pure: `now` passed in."""

    def __init__(self, per_peer=(PER_PEER_RATE, PER_PEER_BURST), everyone=(ALL_RATE, ALL_BURST),
                 tracked: int = TRACKED_ASKERS):
        self.per_peer = per_peer
        self.tracked = tracked
        self.everyone = TokenBucket(everyone[0], everyone[1])
        self._askers = OrderedDict()
        self.refused = 0

    def allow(self, asker: bytes, now: float) -> bool:
        bucket = self._askers.get(asker)
        if bucket is None:
            bucket = self._askers[asker] = TokenBucket(*self.per_peer, now=now)
            if len(self._askers) > self.tracked:
                self._askers.popitem(last=False)
        else:
            self._askers.move_to_end(asker)
        if bucket.charge(1, now) > 0:
            self.refused += 1
            return False
        if self.everyone.charge(1, now) > 0:
            bucket.level += 1          # not this asker's fault: give its token back
            self.refused += 1
            return False
        return True


class Discovery:
    def __init__(self, node_id: bytes, own_record, clock, rng, probe, connect,
                 home: str = None, diversity: bool = True):
        """own_record() -> this node's NodeRecord; probe(node_id, host, port)
        -> Deferred[Connection] dialled by this node to exactly that address;
        connect(node_id, host, port) -> Deferred[Connection] (any, pooled)."""
        self.node_id = node_id
        self.own_record = own_record
        self.clock = clock
        self.rng = rng
        self.probe = probe
        self.connect = connect
        self.path = os.path.join(home, PEERS_FILE) if home else None
        self.table = RoutingTable(node_id, diversity=diversity)
        self.quota = FindNodeQuota()
        self.checker = RecordChecker()
        self.queue = deque()          # records waiting for their probe
        self.queued = set()
        self.probing = 0
        self.probed = OrderedDict()   # id -> (when last probed, at which address)
        self.refreshed = {}           # bucket index -> when last looked up
        self.joined = False
        self.on_verified = None       # told of each record that passed its probe
        self.counters = {"find_node_answered": 0, "find_node_refused": 0, "probes": 0,
                         "probes_failed": 0, "lookups": 0, "queue_dropped": 0}
        self._calls = []
        self._retry = None
        self._paced = TokenBucket(SETTLED_PROBE_RATE, SETTLED_PROBE_BURST,
                                  now=clock.seconds())
        self._pump_later = None

    # ---- serving -------------------------------------------------------------

    def answer(self, conn, message) -> messages.FoundNodes:
        """FIND_NODE from `conn`: the k nearest records held; RATE_LIMITED
        past the quota. An asker's own record (a node's) becomes a
        candidate for the table (probed before it enters)."""
        now = self.clock.seconds()
        if not self.quota.allow(conn.peer_id, now):
            self.counters["find_node_refused"] += 1
            raise RemoteError(ErrorCode.RATE_LIMITED,
                              "too many FIND_NODE requests; wait a second and retry")
        self.counters["find_node_answered"] += 1
        record = message.record
        if record is not None and record.node_id == conn.peer_id:
            self.consider([record])
        live = now - CLOCK_SLACK
        return messages.FoundNodes([c.record for c in self.table.closest(message.target, K)
                                    if c.record is not None and c.record.expires >= live])

    # ---- who enters the table ---------------------------------------------------

    def consider(self, records, checked: bool = False) -> int:
        """Records heard of: those that check (`checked`: the caller checked
        them already) and are new (or newer) wait for a probe. Returns how
        many were queued."""
        now = self.clock.seconds()
        queued = 0
        for record in (records if checked else self.checker.check(records, now)):
            node_id = record.node_id
            if node_id == self.node_id or node_id in self.queued:
                continue
            if record.first_tcp() is None:
                continue    # reached only through a relay: never in a table of direct ones
            held = self.table.get(node_id)
            if held is not None and held.record is not None and \
                    held.record.sequence >= record.sequence:
                continue
            when, where = self.probed.get(node_id, (-PROBE_AGAIN_AFTER, None))
            if held is None and (
                    (now - when < PROBE_AGAIN_AFTER and where == record.first_tcp())
                    or not self.table.has_room(node_id, subnet_of(record.first_tcp()[0]))):
                continue    # probed lately, or it could not go in anyway
            if len(self.queue) >= MAX_QUEUED:
                self.counters["queue_dropped"] += 1
                continue
            self.queue.append(record)
            self.queued.add(node_id)
            queued += 1
        self._pump()
        return queued

    def settled(self) -> bool:
        """Joined, with a table of K contacts: further probes are paced."""
        return self.joined and len(self.table) >= K

    def _pump(self) -> None:
        while self.queue and self.probing < PROBES_AT_ONCE:
            if self.settled():
                wait = self._paced.charge(1, self.clock.seconds())
                if wait > 0:
                    self._paced.level += 1      # not taken: no probe sent
                    if self._pump_later is None and self._calls is not None:
                        self._pump_later = self.clock.callLater(wait, self._pump_again)
                    return
            record = self.queue.popleft()
            self.queued.discard(record.node_id)
            if self.table.get(record.node_id) is None and not self.table.has_room(
                    record.node_id, subnet_of(record.first_tcp()[0])):
                continue        # filled up while it waited
            self.probing += 1
            self._remember_probe(record.node_id, record.first_tcp())
            d = self.check_reachable(record)
            d.addBoth(self._probed)

    def _pump_again(self) -> None:
        self._pump_later = None
        self._pump()

    def _probed(self, result):
        self.probing -= 1
        self._pump()
        return None

    def _remember_probe(self, node_id, where) -> None:
        self.probed[node_id] = (self.clock.seconds(), where)
        self.probed.move_to_end(node_id)
        while len(self.probed) > PROBED_MEMORY:
            self.probed.popitem(last=False)

    @defer.inlineCallbacks
    def check_reachable(self, record):
        """Dial the record's address expecting its key, PING; offer it to
        the table if that worked. Fires with True or False, never fails."""
        self.counters["probes"] += 1
        host, port = record.first_tcp()
        try:
            conn = yield self.probe(record.node_id, host, port).addTimeout(
                QUERY_TIMEOUT, self.clock)
            try:
                yield conn.request(Op.PING, messages.Empty()).addTimeout(QUERY_TIMEOUT, self.clock)
            finally:
                if getattr(conn, "probe_only", False):
                    conn.close()
        except Exception as err:
            self.counters["probes_failed"] += 1
            log.debug("probe of %s at %s:%s failed: %s", record.node_id.hex()[:12], host, port, err)
            if self.table.get(record.node_id) is not None:
                self.table.remove(record.node_id)
            return False
        self._offer(record)
        if self.on_verified is not None:
            self.on_verified(record)
        return True

    def _offer(self, record) -> None:
        host, _ = record.first_tcp()
        contact = Contact(record.node_id, subnet_of(host), record)
        offered = self.table.offer(contact, self.clock.seconds())
        if offered.outcome == "full":
            self._ping_oldest(offered.ping)

    def _ping_oldest(self, oldest) -> None:
        host, port = oldest.record.first_tcp()
        d = self.connect(oldest.node_id, host, port).addTimeout(QUERY_TIMEOUT, self.clock)
        d.addCallback(lambda conn: conn.request(Op.PING, messages.Empty()))
        d.addCallbacks(lambda _: True, lambda _: False)
        d.addCallback(lambda answered: self.table.ping_result(
            oldest.node_id, answered, self.clock.seconds()))

    def connection_ready(self, conn) -> None:
        pass  # an inbound connection proves nothing about its address

    def connection_lost(self, conn) -> None:
        pass

    # ---- lookups ---------------------------------------------------------------

    def _contacts_of(self, answer) -> list:
        records = self.checker.check(answer.records[:messages.MAX_FOUND], self.clock.seconds())
        records = [r for r in records if r.node_id != self.node_id]
        self.consider(records, checked=True)   # probed before any enters the table
        return [Contact(r.node_id, subnet_of(r.first_tcp()[0]), r) for r in records]

    def lookup(self, target: bytes, seeds=None) -> defer.Deferred:
        """An iterative lookup from the table (or `seeds`): fires with the Lookup."""
        self.counters["lookups"] += 1
        run = Lookup(target, seeds if seeds is not None else self.table.closest(target, K),
                     alpha=ALPHA)
        return drive(run, lambda contact: self._ask_for(contact, target))

    def _ask_for(self, contact, target):
        """One FIND_NODE of a lookup: the checked contacts its answer names."""
        host, port = contact.record.first_tcp()
        d = self.connect(contact.node_id, host, port)
        d.addCallback(self._find_node, target, contact.record)
        d.addTimeout(QUERY_TIMEOUT, self.clock)
        d.addCallbacks(self._contacts_of, self._query_failed, errbackArgs=(contact.node_id,))
        return d

    def _query_failed(self, failure, node_id):
        """A contact that cannot be dialled at its address leaves the table
        (a refresh or a later probe brings it back if it returns)."""
        if failure.check(ConnectFailed, defer.TimeoutError) and self.table.get(node_id):
            self.table.remove(node_id)
        return failure

    def _find_node(self, conn, target, record):
        answer = conn.request(Op.FIND_NODE, messages.FindNode(target, self.own_record()))
        if conn.tls_client and _peer_address(conn) == record.first_tcp():
            # this node dialled the record's address and its key answered:
            # that is the probe, done already
            answer.addCallback(self._verified_by_answer, record)
        return answer

    def _verified_by_answer(self, answer, record):
        if self.table.get(record.node_id) is None:
            self._offer(record)
            if self.on_verified is not None:
                self.on_verified(record)
        return answer

    @defer.inlineCallbacks
    def join(self, addresses):
        """Ask each bootstrap address for the nodes nearest this one, then
        look this node's own id up from them (which tells the nodes nearest
        it about it: they probe it back). Fires with the table's size."""
        seeds = {}
        for host, port in addresses:
            try:
                conn = yield self.connect(None, host, port).addTimeout(QUERY_TIMEOUT, self.clock)
                answer = yield conn.request(Op.FIND_NODE, messages.FindNode(
                    self.node_id, self.own_record())).addTimeout(QUERY_TIMEOUT, self.clock)
            except Exception as err:
                log.info("bootstrap %s:%s did not answer FIND_NODE: %s", host, port, err)
                continue
            for contact in self._contacts_of(answer):
                seeds.setdefault(contact.node_id, contact)
        seeds.pop(self.node_id, None)
        yield self.lookup(self.node_id, list(seeds.values()) + self.table.closest(self.node_id))
        self.joined = bool(len(self.table)) or not addresses
        if self.joined and addresses:
            # the join's lookup and the answers it brought filled the
            # buckets just now: the first refresh is due REFRESH_INTERVAL
            # later, not at the first tick (which, in a crowd starting
            # together, added four lookups a node to the start)
            now = self.clock.seconds()
            for index in range(self.table.nearest_bucket() + 1):
                self.refreshed.setdefault(index, now)
        return len(self.table)

    def refresh(self, force: bool = False) -> defer.Deferred:
        """Look up a random id in each bucket (up to the nearest one held)
        not looked up for REFRESH_INTERVAL; at most REFRESH_BUCKETS_A_TICK."""
        now = self.clock.seconds()
        stale = [i for i in range(self.table.nearest_bucket() + 1)
                 if force or now - self.refreshed.get(i, -REFRESH_INTERVAL) >= REFRESH_INTERVAL]
        runs = []
        for index in stale[:REFRESH_BUCKETS_A_TICK]:
            self.refreshed[index] = now
            runs.append(self.lookup(self.table.random_id_in_bucket(index, self.rng)))
        return defer.DeferredList(runs)

    # ---- lifecycle --------------------------------------------------------------

    def start(self, bootstraps=()) -> None:
        """Load the saved table (its records probed again), join through
        the bootstrap addresses, then refresh and save on the clock."""
        if self._calls is None:       # stopped before it started
            return
        saved = peer_file.load(self.path) if self.path else []
        if saved:
            self.consider(saved)
        self._join_until_joined(list(bootstraps), JOIN_RETRY)
        self._every(REFRESH_TICK, self.refresh)
        self._every(SAVE_INTERVAL, self.save)

    def _join_until_joined(self, bootstraps, delay) -> None:
        """Join; while nothing answered (a bootstrap busy with a crowd of
        handshakes closes new ones), try again, waiting twice as long each
        time up to JOIN_RETRY_MAX."""
        d = self.join(bootstraps)

        def joined(_):
            if not self.joined and self._calls is not None:
                log.info("joining the DHT found no node yet; again in %.0f s", delay)
                self._retry = self.clock.callLater(
                    delay * self.rng.uniform(0.5, 1.5), self._join_until_joined, bootstraps,
                    min(2 * delay, JOIN_RETRY_MAX))
        d.addErrback(lambda f: log.warning("joining the DHT failed: %s", f.getErrorMessage()))
        d.addCallback(joined)

    def _every(self, interval, what) -> None:
        def tick():
            try:
                result = what()
                if isinstance(result, defer.Deferred):
                    result.addErrback(lambda f: log.info("%s failed: %s", what.__name__,
                                                         f.getErrorMessage()))
            finally:
                self._calls[index] = self.clock.callLater(interval * self.rng.uniform(0.8, 1.2), tick)
        index = len(self._calls)
        self._calls.append(self.clock.callLater(interval * self.rng.uniform(0.5, 1.0), tick))

    def save(self) -> int:
        if not self.path:
            return 0
        records = [c.record for c in self.table.contacts() if c.record is not None]
        try:
            return peer_file.save(self.path, records)
        except OSError as err:
            log.warning("could not save the routing table: %s", err)
            return 0

    def stop(self) -> None:
        for call in self._calls + [self._retry, self._pump_later]:
            if call is not None and call.active():
                call.cancel()
        self._calls = None
        self.save()

    def stats(self) -> dict:
        return {"contacts": len(self.table), "joined": self.joined,
                "queued": len(self.queue), "refused": dict(self.checker.refused),
                **self.counters}
