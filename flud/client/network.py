"""The client's view of the storage nodes: discovery, placement, liveness."""
import logging
import os

from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from flud.client.node_requests import NodeRequests
from flud.client.node_health import NodeHealth
from flud.client.node_finder import RANDOM_WALKS, NodeFinder
from flud.client.interfaces import INetwork
from flud.protocol.client import ClientNet, NodeAddress
from flud.client.placement import rank
from flud.errors import FludError
from flud.protocol.errors import ConnectFailed, ConnectionLost, RemoteError
from flud.protocol import peer_file
from flud.protocol.node_record import RecordRefused, check_record, newer
from flud.client.budget_plan import BudgetPlan, plan_budget
from flud.protocol.ratelimit import Throttle
from flud.protocol.stall import PeerStalled, StallWatch

log = logging.getLogger("flud.client")

CONNECT_TIMEOUT = 10.0
WALK_SECONDS = 3.0   # how long a job's start waits for its random walks
# Walks run beside a job that knows enough nodes already: one refreshes the
# sample; four took CPU from a small backup's own transfer (bench_fixed.py:
# the 51-file mix's transfer 0.19 -> 0.32 s on a busy machine).
WALKS_BESIDE = 1
# The memory transfer follows the queues once they moved this much (or
# drained): the connections report every burst of writes, thousands a second.
SEND_SYNC_STEP = 256 * 1024


class SendQueue:
    """The wire's LocalParty.send_queue: hold()/release() of the ciphertext
    queued in transports, drawn from an allowance reserved from the budget;
    only a longer queue is counted on top of it (held). The transfer lags the
    queues by less than SEND_SYNC_STEP, and is exact when they drain."""

    def __init__(self, transfer, monitor=None, connections: int = 0):
        self.transfer = transfer
        self.monitor = monitor
        self.allowance = transfer.reserved("allowance")
        # the connections' own state: a free-standing reservation of the
        # monitor (not a transfer's buffers, so not in any transfer's peak)
        self.connections = connections
        self.queued = 0     # as the connections report it
        self._counted = 0   # as the transfer counts it

    @property
    def closed(self) -> bool:
        return self.transfer.closed

    def room(self) -> int:
        """What wider windows may still take (connection.Connection queues more than
        its transport's bufferSize while there is room, see SEND_WINDOW): the
        allowance left, less the half kept for the ordinary queues."""
        return self.allowance - self.queued - self.allowance // 2

    def hold(self, nbytes: int, what: str) -> None:
        self.queued += nbytes
        self._sync(what)

    def release(self, nbytes: int, what: str) -> None:
        self.queued -= nbytes
        self._sync(what)

    def _sync(self, what: str) -> None:
        delta = self.queued - self._counted
        if self.queued and -SEND_SYNC_STEP < delta < SEND_SYNC_STEP:
            return
        if self.closed:
            return
        transfer = self.transfer
        if delta > 0:
            take = min(delta, transfer.reserved("allowance"))
            transfer.hand_over(take, "allowance", transfer, what)
            if delta > take:
                transfer.hold(delta - take, what)
        elif delta < 0:
            held = min(-delta, transfer.held(what))
            if held:
                transfer.release(held, what)
            transfer.hand_over(-delta - held, what, transfer, "allowance")
        self._counted = self.queued

    def close(self) -> None:
        if not self.transfer.closed and self.connections:
            self.monitor.unreserve(self.connections)
        self.transfer.close()


# Bootstrap nodes asked for records, at once: more than one, so that one
# hostile bootstrap cannot hide the others' records; few, so that a home that
# lists every node of a testnet does not shake hands with all of them.
BOOTSTRAP_FANOUT = 3
# The nodes this client last found, kept in its home (flud/protocol/peer_file.py):
# a restart finds the network even when no bootstrap address answers.
PEERS_FILE = "peers.v1"


class NotEnoughNodes(FludError):
    """No bootstrap node answered."""

    code = "NOT_ENOUGH_NODES"


class NodeUnavailable(ConnectionLost, FludError):
    """A node this run already found failed or stalled: not asked again."""

    code = "NODE_UNAVAILABLE"


@implementer(INetwork)
class Network(NodeRequests):
    def __init__(self, reactor, home: str, bootstrap, upload_limit: int = 0,
                 download_limit: int = 0):
        """bootstrap: [(host, port)] of nodes to ask for the member list;
        upload_limit, download_limit: bytes/s for all connections together
        (0: none)."""
        self.reactor = reactor
        self.net = ClientNet(reactor, home)
        if upload_limit:
            self.net.local.upload_limit = Throttle(reactor, upload_limit)
        if download_limit:
            self.net.local.download_limit = Throttle(reactor, download_limit)
        self.bootstrap = list(bootstrap)
        self.nodes = {}       # node id -> NodeAddress
        self.peers_path = os.path.join(home, PEERS_FILE)
        self.finder = NodeFinder(reactor, self._find_node)
        self.relocated = {}   # node id -> (old, new) address: holders found by id after a move
        self.health = NodeHealth()
        self.failed = self.health.failed  # node ids that failed during this run
        self.watch = StallWatch(reactor, self.net.pool.connections, self._stalled)
        # client/trust_view.py (set by the composition root): placement by
        # the trust rules, and this run's request outcomes for reputation
        self.trust = None
        self.outcomes = {}    # node id -> [requests answered, requests failed]
        self._walking = None  # the random walks run beside the job (walk_beside)

    @property
    def client_id(self) -> bytes:
        return self.net.client_id

    @defer.inlineCallbacks
    def discover(self, enough: int | None = None):
        """Ask every bootstrap node (at once) for the records it holds and
        keep the union: the highest valid sequence of each node's signed
        record wins, and a record whose signature, expiry or address does
        not check is dropped (node_record.check_record). Asking them all is
        what keeps one hostile bootstrap from confining this client to the
        ids it invented: it can add fakes, not hide the others' records.

        enough: when the bootstrap nodes already named at least this many
        live nodes, the random walks run on beside the job instead of before
        it (their nodes join as they answer; see walk_beside)."""
        records, errors, refused, answered = {}, [], 0, []
        stalled = {}   # (host, port) -> why: a bootstrap that accepted TCP, never TLS
        for start in range(0, len(self.bootstrap), BOOTSTRAP_FANOUT):
            window = self.bootstrap[start:start + BOOTSTRAP_FANOUT]
            answers = yield defer.DeferredList(
                [self._ask_bootstrap(host, port) for host, port in window], consumeErrors=True)
            for (host, port), (ok, value) in zip(window, answers):
                if ok:
                    answered.append((host, port, value))
                else:
                    errors.append(f"{host}:{port}: {value.getErrorMessage()}")
                    if value.check(defer.TimeoutError):
                        stalled[(host, port)] = value.getErrorMessage()
            if len(answered) >= BOOTSTRAP_FANOUT:
                break
        now = self.reactor.seconds()
        for host, port, (peer, entries) in answered:
            self.nodes[peer.node_id] = NodeAddress(peer.node_id, host, port)
            for entry in entries:
                held = records.get(entry.node_id)
                if held is not None and not newer(entry.record, held[0]):
                    continue
                try:
                    check_record(entry.record, now)
                except RecordRefused:
                    refused += 1
                    continue
                records[entry.node_id] = (entry.record, entry.alive or
                                          (held is not None and held[1]))
        saved = peer_file.load(self.peers_path)
        self.finder.learn(saved)
        self.finder.learn(record for record, _ in records.values())
        if not self.nodes and not saved:
            raise NotEnoughNodes("no node answered; tried " + "; ".join(errors) +
                                 ". Is the testnet up (`flud testnet status --dir DIR`)?")
        for node_id, (record, alive) in records.items():
            address = record.dial_address()   # direct, else "relay:ID" (pool dials through it)
            if alive and address and node_id not in self.nodes:
                self.nodes[node_id] = NodeAddress(node_id, *address)
        # The node at a bootstrap address that stalled fails for this run, as
        # in peer(): the walks and the job do not wait on it a second time.
        for node_id, node in self.nodes.items():
            why = stalled.get((node.host, node.port))
            if why is not None:
                self.mark_failed(node_id, why)
        def relay_address(relay_id):
            held = records.get(relay_id)
            record = held[0] if held else self.finder.records.get(relay_id)
            return record.first_tcp() if record is not None else None
        self.net.pool.resolve_relay = relay_address
        # Random walks on the DHT: every node that answers one is a
        # candidate, found without any node's whole view (and, when no
        # bootstrap answered, from the nodes saved last time).
        beside = enough is not None and len(self.nodes) >= enough
        if beside:
            self.walk_beside(WALKS_BESIDE)
        else:
            yield self.walk()
        if not self.nodes:
            raise NotEnoughNodes("no node answered; tried " + "; ".join(errors) +
                                 f" and the {len(saved)} node(s) saved in {self.peers_path}. "
                                 "Is the testnet up (`flud testnet status --dir DIR`)?")
        self.records_refused = refused + sum(self.finder.checker.refused.values())
        if not beside:   # (else when the walks end, with what they found)
            self.save_peers()
        return len(self.nodes)

    @defer.inlineCallbacks
    def walk(self, count: int = RANDOM_WALKS):
        """Random walks (lookups of random ids): the nodes that answered
        join the candidates placement ranks. Fires with how many are new."""
        # Bounded in time: a walk is a sample, and a stalled node on its
        # path (TCP accepted, TLS never) would hold every job's start for a
        # query timeout per round. What answered by then is the sample; the
        # walks still running finish on their own and teach later lookups.
        walking = self.finder.walk(count)
        timer = defer.Deferred()
        call = self.reactor.callLater(WALK_SECONDS, timer.callback, None)
        yield defer.DeferredList([walking, timer], fireOnOneCallback=True, consumeErrors=True)
        if call.active():
            call.cancel()
        answered = set(self.finder.answered)
        new = 0
        for node_id in answered:
            record = self.finder.records.get(node_id)
            if record is not None and node_id not in self.nodes:
                self.nodes[node_id] = NodeAddress(node_id, *record.first_tcp())
                new += 1
        return new

    def walk_beside(self, count: int = RANDOM_WALKS) -> defer.Deferred:
        """The random walks, not waited for: a job that knows enough nodes
        starts at once, and each node that answered a walk joins the
        candidates when the walks end (as a holder found by id does,
        locate()), then the known nodes are saved again for the next run."""
        self._walking = walking = self.finder.walk(count)

        def ended(_):
            if self._walking is None:   # the network closed first, and saved them
                return
            self._walking = None
            for node_id in set(self.finder.answered):
                record = self.finder.records.get(node_id)
                if record is not None and node_id not in self.nodes:
                    self.nodes[node_id] = NodeAddress(node_id, *record.first_tcp())
            self.save_peers()
        return walking.addBoth(ended)

    def _find_node(self, node_id, host, port, target):
        if node_id in self.failed:   # failed this run: not asked again (as peer())
            return defer.fail(NodeUnavailable(
                f"node {node_id.hex()[:12]} failed earlier in this run"))
        d = self.net.peer(NodeAddress(node_id, host, port))
        if node_id in self.nodes:
            # a candidate that stalls a lookup's dial fails for this run, as
            # in peer(): no later lookup or job waits on it again
            self.watch.start()
            deadline = self.watch.deadline()
            d.addTimeout(deadline, self.reactor)
            d.addErrback(self._stalled_dial, node_id, deadline)
        return d.addCallback(lambda peer: peer.find_node(target))

    def _stalled_dial(self, failure, node_id, deadline):
        """Only a stall fails the node here: a refusal at the address we
        had may mean it moved (peer() looks it up then)."""
        if failure.check(defer.TimeoutError, defer.CancelledError):
            return self._unreachable(failure, node_id, deadline)
        return failure

    def save_peers(self) -> None:
        """Keep the records of the nodes known now in the home (best effort)."""
        known = [self.finder.records[nid] for nid in self.nodes if nid in self.finder.records]
        try:
            peer_file.save(self.peers_path, known)
        except OSError as err:
            log.info("could not save the known nodes in %s: %s", self.peers_path, err)

    @defer.inlineCallbacks
    def locate(self, node_id: bytes):
        """Find a node by its id on the DHT (its newest record, from the node
        itself answering there): fires with its NodeAddress, or None."""
        record = yield self.finder.find(node_id)
        if record is None:
            return None
        address = NodeAddress(node_id, *record.first_tcp())
        held = self.nodes.get(node_id)
        if held is None or (held.host, held.port) != (address.host, address.port):
            if held is not None:
                self.relocated[node_id] = ((held.host, held.port), (address.host, address.port))
                log.info("node %s moved from %s:%s to %s:%s", node_id.hex()[:12],
                         held.host, held.port, address.host, address.port)
            self.nodes[node_id] = address
        return address

    def _ask_bootstrap(self, host, port):
        # The dial is held to the stall deadline, as in peer(): a stopped
        # bootstrap node completes TCP from its kernel's backlog, never TLS,
        # and the whole window waits for it (10 s held every job's start).
        self.watch.start()
        deadline = min(CONNECT_TIMEOUT, self.watch.deadline())
        d = self.net.peer(NodeAddress(None, host, port)).addTimeout(deadline, self.reactor)
        d.addErrback(self._bootstrap_stalled, host, port, deadline)
        d.addCallback(lambda peer: peer.peers().addCallback(lambda entries: (peer, entries)))
        return d

    @staticmethod
    def _bootstrap_stalled(failure, host, port, deadline):
        failure.trap(defer.TimeoutError)
        raise defer.TimeoutError(f"{host}:{port} did not complete its handshake in "
                                 f"{deadline:.1f} s")

    def alive_ids(self) -> list:
        return [nid for nid in self.nodes if nid not in self.failed]

    def place(self, object_id: bytes, count: int) -> list:
        """The first `count` nodes for object_id: not failed, not one that
        refused this home for quota (QUOTA) this run; with trust rules set,
        chosen by them (diversity, reputation, vetting, friends). Nodes
        reached directly come first, those reached only through a relay
        after (a relayed holder costs its relay's bandwidth on every
        restore)."""
        full = self.health.quota
        ids = [n for n in self.alive_ids() if n not in full]
        if self.trust is not None:
            direct = [n for n in ids if not self.relayed(n)]
            chosen = self.trust.choose(object_id, self.nodes, direct, count)
            if len(chosen) < count and len(direct) < len(ids):
                chosen = sorted(self.trust.choose(object_id, self.nodes, ids, count),
                                key=self.relayed)
            return chosen
        return sorted(rank(object_id, ids), key=self.relayed)[:count]

    def relayed(self, node_id: bytes) -> bool:
        """Is this node reached only through a relay? (placement's preference hook)"""
        node = self.nodes.get(node_id)
        return node is not None and node.host.startswith("relay:")

    def address(self, node_id: bytes) -> NodeAddress:
        return self.nodes[node_id]

    def peer(self, node_id: bytes):
        """Deferred[PeerClient]. A node that failed this run is not asked
        again (NodeUnavailable at once); one that cannot be reached within
        the stall deadline (a stopped node completes TCP from its kernel's
        backlog, never TLS) is failed, so the callers use other holders."""
        if node_id in self.failed:
            return defer.fail(NodeUnavailable(
                f"node {node_id.hex()[:12]} failed earlier in this run"))
        node = self.nodes.get(node_id)
        if node is None:       # a holder known by id only: find it on the DHT
            d = self.locate(node_id)
            d.addCallback(lambda found: self._dial(node_id, retry=False) if found else
                          defer.fail(KeyError(f"node {node_id.hex()[:12]} is unknown, and no "
                                              f"lookup of its id found it")))
            return d
        return self._dial(node_id, retry=True)

    def _dial(self, node_id, retry: bool):
        node = self.nodes[node_id]
        self.watch.start()
        deadline = self.watch.deadline()
        d = self.net.peer(node).addTimeout(deadline, self.reactor)
        if retry:
            d.addErrback(self._maybe_moved, node_id, (node.host, node.port), deadline)
        else:
            d.addErrback(self._unreachable, node_id, deadline)
        return d

    def _maybe_moved(self, failure, node_id, was, deadline):
        """A node that refused or never answered at the address we had may
        have moved: look its id up once, and dial its new address."""
        if not failure.check(ConnectFailed):
            return self._unreachable(failure, node_id, deadline)

        def found(address):
            if address is None or (address.host, address.port) == was:
                return self._unreachable(failure, node_id, deadline)
            return self._dial(node_id, retry=False)
        d = self.locate(node_id)
        d.addCallback(found)
        return d

    def _unreachable(self, failure, node_id, deadline):
        # The caller whose timer ran out sees TimeoutError; the others that
        # waited on the same dial see it cancelled.
        if failure.check(defer.TimeoutError, defer.CancelledError):
            failure = Failure(PeerStalled(f"node {node_id.hex()[:12]} did not complete "
                                          f"its handshake in {deadline:.1f} s"))
        self.mark_failed(node_id, failure.getErrorMessage())
        return failure

    def _stalled(self, conn, silence: float) -> None:
        """The stall watch found a connection silent past its deadline."""
        error = PeerStalled(f"node {conn.peer_id.hex()[:12]} made no progress for "
                            f"{silence:.1f} s (deadline {self.watch.deadline():.1f} s)")
        self.mark_failed(conn.peer_id, error)
        conn.abort(error)

    def call(self, node_id: bytes, method: str, *args, **kwargs):
        """peer(node).method(*args, **kwargs)."""
        d = self.peer(node_id)
        d.addCallback(lambda p: getattr(p, method)(*args, **kwargs))
        d.addBoth(self._count_outcome, node_id)
        return d

    def _count_outcome(self, result, node_id):
        """A request answered (an error the node sent is an answer too) or
        not (the connection failed, stalled): what reputation is told."""
        if isinstance(result, Failure) and result.check(defer.CancelledError):
            return result    # this client gave up on it: nothing said of the node
        counts = self.outcomes.setdefault(node_id, [0, 0])
        answered = not isinstance(result, Failure) or result.check(RemoteError)
        counts[0 if answered else 1] += 1
        return result

    def open_store(self, node_id: bytes, size: int):
        """Fires with a StreamedStore of `size` bytes open on that node."""
        return self.peer(node_id).addCallback(lambda p: p.open_store(size))

    def cancel(self, node_id: bytes, d) -> None:
        """Abandon a request made with call() (its Deferred fails CANCELLED)."""
        conn = self.net.pool.connection(node_id)
        if conn is not None:
            conn.cancel(d)

    def count_sends(self, monitor, plan: BudgetPlan = None) -> SendQueue:
        """Count the ciphertext every connection has queued in its transport
        on one memory transfer ("network"), out of an allowance reserved from
        the budget now (at the start of a run: nothing else waits for it),
        beside a reservation for the connections' own state: both as the
        run's budget plan says (client/budget_plan.py; none given: a plan for
        a run of these nodes that keeps no segments). Close it when the run
        is over."""
        transfer = monitor.transfer("network", "TLS send queues")
        if plan is None:
            plan = plan_budget(monitor.budget_bytes, len(self.nodes))
        granted = [transfer.reserve(plan.allowance, "allowance"),
                   monitor.reserve(plan.connections)]
        for d in granted:
            if not d.called:  # the budget is taken: count the queues on top
                d.addErrback(lambda _: None)
                d.cancel()
        queue = SendQueue(transfer, monitor, plan.connections if granted[1].called else 0)
        self.net.local.send_queue = queue
        return queue

    def set_limits(self, upload: int, download: int) -> None:
        """New rate limits for every connection from now on (0: none). A
        throttle that is dropped is not stopped: it wakes those it holds."""
        for name, rate in (("upload_limit", upload), ("download_limit", download)):
            current = getattr(self.net.local, name, None)
            if not rate:
                setattr(self.net.local, name, None)
            elif current is None:
                setattr(self.net.local, name, Throttle(self.reactor, rate))
            elif current.rate != rate:
                current.set_rate(rate)

    def mark_failed(self, node_id: bytes, why=None) -> None:
        self.health.mark_failed(node_id, why)

    def blame(self, node_id: bytes, error) -> bool:
        """Count a request's error against its node (NodeHealth); True if
        the node is now failed for the rest of the run."""
        return self.health.blame(node_id, error)

    def close(self) -> None:
        if self._walking is not None:   # the job ended first: what is known now is kept
            self._walking = None
            self.save_peers()
        self.watch.stop()
        for limit in (self.net.local.upload_limit, self.net.local.download_limit):
            if limit is not None:
                limit.stop()
        self.net.close()
