"""The node: composition root of store, protocol, membership and monitor.

Home layout:
    identity.pem   the node's key (0600)       tls-cert.pem  self-signed cert for it
    store/         shares, archives, index      roots/        owners' root records
    node.json      written once listening: the readiness signal for launchers
    node.log       the log
"""
import json
import os
import random
import time

from twisted.internet import defer

from flud import procfs
from flud.node.config import NodeConfig
from flud.node.discovery import Discovery
from flud.node.compaction import CompactionScheduler
from flud.node.gate import GatedConnectionFactory
from flud.node.leases import LeaseKeeper, offset_file_reader
from flud.node.dial_back import DialBackServer, Prober
from flud.node.own_record import OwnRecord
from flud.node.port_mapping import PortMapper, looks_natted
from flud.node.relay import RelayDoor, RelayService, ReservationKeeper
from flud.node.puncher import DIAL_RELAYED_ENV, Puncher, RelayedPeerDialer
from flud.protocol.punched import share_listening_port
from flud.protocol.node_record import Address
from flud.node.reachability import candidate_addresses, is_loopback
from flud.node.peers import Membership
from flud.node.quota import QuotaKeeper
from flud.node.roots import RootStore
from flud.protocol import messages
from flud.protocol.party import load_party
from flud.protocol.pool import ConnectionPool
from flud.node.request_handler import NodeHandler
from flud.storage.archives import STEP_COPYING
from flud.storage.leases import LeaseTerms
from flud.trust.ledger import QuotaTerms

STORE_WORKERS = 4
UNMAP_WAIT = 3.0   # seconds a stopping node waits for its gateway to drop its port
# Developer switch: a file holding seconds added to the node's lease clock
# (docs/DESIGN.md, "Developer switches").
CLOCK_FILE_ENV = "FLUD_NODE_CLOCK_FILE"
# Developer switch: seconds a compaction sleeps after each run of members it
# copied, so a test can act (read, SIGKILL) in the middle of one.
COMPACTION_PAUSE_ENV = "FLUD_COMPACTION_PAUSE"


def compaction_pause_hook(seconds: float):
    """A store fault hook that sleeps `seconds` after each copied run."""
    def hook(step: str) -> None:
        if step == STEP_COPYING:
            time.sleep(seconds)
    return hook




def quota_terms(config: NodeConfig) -> QuotaTerms:
    return QuotaTerms(config.grant, config.give_ratio, dict(config.owner_quotas),
                      config.claim_allowance)


def _peer_address(conn):
    try:
        peer = conn.transport.getPeer()
    except AttributeError:
        return None
    return (peer.host, peer.port)


def write_json_atomically(path: str, value) -> None:
    temp = path + ".tmp"
    with open(temp, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


class Service:
    """The bookkeeping of twisted.application.service.Service (running, name,
    parent), which NodeService used to inherit, without importing that
    module in every node: it brings twisted.plugin, twisted.python.modules,
    zipfile and twisted.persisted, and with them pickle (0.6 MB of RSS per
    node, measured idle). Nothing puts a node under a twistd Application;
    setServiceParent still works as Twisted's does."""

    running = 0
    name = None
    parent = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("running", None)
        return state

    def setName(self, name):
        if self.parent is not None:
            raise RuntimeError("cannot change name when parent exists")
        self.name = name

    def setServiceParent(self, parent):
        from twisted.application.service import IServiceCollection
        if self.parent is not None:
            self.disownServiceParent()
        parent = IServiceCollection(parent, parent)
        self.parent = parent
        self.parent.addService(self)

    def disownServiceParent(self):
        d = self.parent.removeService(self)
        self.parent = None
        return d

    def privilegedStartService(self):
        pass

    def startService(self):
        self.running = 1

    def stopService(self):
        self.running = 0


class NodeService(Service):
    name = "flud-node"

    def __init__(self, reactor, config: NodeConfig, seed=None):
        self.reactor = reactor
        self.config = config
        self.home = os.path.abspath(config.home)
        self.host = config.host
        self.port = config.port
        self.join_address = config.join
        self.capacity = config.capacity
        self.memory_log = config.memory_log
        self.memory_budget = config.memory_budget
        self.rng = random.Random(seed)
        self.started_at = time.time()
        self._listening = None

    def startService(self):
        super().startService()
        from flud.memory import DEFAULT_BUDGET, MemoryMonitor
        from flud.workers import CPUPool
        from flud.storage.disk import ShareStore

        from flud.lean import proc_rss
        self.monitor = MemoryMonitor(rss_reader=proc_rss, budget_bytes=self.memory_budget or DEFAULT_BUDGET)
        self.monitor.sample()
        self.monitor.mark_static()
        self.local = load_party(self.home, messages.ROLE_NODE, self.host, self.port)
        self.node_id = self.local.identity.node_id
        pause = os.environ.get(COMPACTION_PAUSE_ENV)
        self.store = ShareStore(os.path.join(self.home, "store"), self.capacity,
                                fsync=os.environ.get("FLUD_UNSAFE_NO_FSYNC") != "1",
                                fault_hook=compaction_pause_hook(float(pause)) if pause else None)
        self.roots = RootStore(os.path.join(self.home, "roots"))
        self.workers = CPUPool(self.reactor, size=STORE_WORKERS)
        clock_file = os.environ.get(CLOCK_FILE_ENV)
        self.leases = LeaseKeeper(
            self.store.leases, self.reactor, self.workers.run,
            LeaseTerms(self.config.lease_seconds, self.config.trash_seconds),
            self.config.lease_sweep_interval,
            read_offset=offset_file_reader(clock_file) if clock_file else None,
            on_purged=self.roots.remove, monotonic=time.monotonic)
        self.compactions = CompactionScheduler(self.store, self.reactor, self.workers.run)
        self.quota = QuotaKeeper(quota_terms(self.config), self.home, self.store,
                                 self.local.identity, self.reactor, self.workers.run,
                                 self.config.ledger_interval, random.Random(self.rng.random()),
                                 durable=os.environ.get("FLUD_UNSAFE_NO_FSYNC") != "1")
        self.handler = NodeHandler(self.store, self.workers.run, roots=self.roots,
                                   stats=self.stats, monitor=self.monitor, inline_commits=True,
                                   on_request=self.leases.seen,
                                   on_delete=self.compactions.deleted)
        self.handler.quota = self.quota
        self.pool = ConnectionPool(self.reactor, self.local, self.handler)
        self.door = GatedConnectionFactory(self.local, self.handler, self.reactor)
        self.relay = RelayService(self.reactor, enabled=self.config.relay)
        self.handler.relay = self.relay
        self._listening = self.reactor.listenTCP(
            self.port, RelayDoor(self.door, self.relay, self.reactor), interface=self.host)
        self.local.listen_port = self._listening.getHost().port
        self.own_record = OwnRecord(self.local.identity, self.home, self.host,
                                    self.local.listen_port, self.capacity,
                                    addresses=candidate_addresses(self.host,
                                                                  self.local.listen_port))
        self.membership = Membership(self.own_record, self.reactor, self.rng,
                                     connect=self.pool.get, node_id=self.node_id)
        self.handler.membership = self.membership
        self.quota.membership, self.quota.pool = self.membership, self.pool
        self.handler.dial_back = DialBackServer(self.reactor, self.local, self.handler)
        self.prober = None
        if not all(is_loopback(a.host) for a in self.own_record.candidates):
            # a node on loopback only (a testnet) is reached from this host
            # or not at all: nothing to ask
            self.prober = Prober(self.reactor, self.local, self.handler, self.membership,
                                 self.own_record, self.local.listen_port, self.rng)
        self.reservation = ReservationKeeper(self.reactor, self.local, self.handler,
                                             self.membership, self.pool.get, self.rng)
        self.handler.reservation = self.reservation
        self.pool.resolve_relay = self.membership.relay_address
        if self.prober is not None:
            self.prober.extra_hints = self.reservation.hints
            self.reservation.on_change = self.prober.republish
            self.prober.on_verdict = self._verdict
            self.relay.reachable = lambda: self.prober.verdict != "private"
        self.port_mapper = PortMapper(self.reactor, self.workers.run, self.local.listen_port,
                                      self._port_mapped)
        if self.prober is not None:
            # punches dial from the listening port (flud/protocol/punched.py);
            # a node on loopback only punches nothing and shares nothing
            share_listening_port(self._listening)
        self.puncher = Puncher(self.reactor, self.local, self.handler, self.pool,
                               self.membership, self.prober, self.host)
        self.handler.punch = self.puncher
        self.relayed_dialer = None
        if os.environ.get(DIAL_RELAYED_ENV) == "1":
            self.relayed_dialer = RelayedPeerDialer(self.reactor, self.node_id, self.membership,
                                                    self.pool, self.prober)
            self.relayed_dialer.start()
        self.handler.listeners = [self.pool, self.membership, self.relay, self.reservation,
                                  self.puncher]
        self.discovery = Discovery(self.node_id, self.own_record, self.reactor, self.rng,
                                   probe=self._probe, connect=self._connect, home=self.home)
        self.handler.discovery = self.discovery
        self.membership.on_records = lambda records: self.discovery.consider(records, True)
        self.discovery.on_verified = lambda record: self.membership.merge(
            [messages.PeerEntry(record, True)])
        if self.memory_log:
            self.monitor.open_log(self.memory_log)
        self.monitor.start_sampling(self.reactor)
        self.membership.start()
        if self.prober is not None:
            self.prober.start()
            if looks_natted(a.host for a in self.own_record.candidates):
                self.port_mapper.start()    # mapped before the first round, if it can be
        self.leases.start()
        self.compactions.start()
        self.quota.start()
        if self.join_address:
            host, port = self.join_address
            d = self.membership.join(host, port)
            d.addErrback(self._join_failed)
            # after the gossip's join: its connection to the bootstrap serves both
            d.addBoth(lambda _: self.discovery.start(
                [self.join_address, *self.config.also_join]))
        else:
            self.discovery.start([])
        self.info = {"node_id": self.node_id.hex(), "host": self.host,
                     "port": self.local.listen_port, "pid": os.getpid(), "home": self.home,
                     "start": procfs.start_ticks(os.getpid())}
        write_json_atomically(os.path.join(self.home, "node.json"), self.info)

    def _verdict(self, verdict) -> None:
        """A private node reserves on a relay; a public one needs none."""
        if verdict == "private":
            self.reservation.start()
            self.port_mapper.start()
        elif verdict == "public":
            self.reservation.stop()

    def _port_mapped(self, host: str, port: int) -> None:
        """The gateway forwards a port to us: a candidate, checked by the
        next dial-back round (asked for now)."""
        address = Address.tcp(host, port)
        if address not in self.own_record.candidates:
            self.own_record.candidates = self.own_record.candidates + (address,)
        if self.prober is not None:
            self.prober.probe_soon()
    def _connect(self, node_id, host, port):
        """pool.get, but an address whose node is not known yet (a bootstrap)
        reuses a connection this node dialled there already."""
        if node_id is None:
            for conn in self.pool.connections():
                if conn.tls_client and _peer_address(conn) == (host, port):
                    return defer.succeed(conn)
        return self.pool.get(node_id, host, port)

    def _probe(self, node_id, host, port):
        """A connection this node dialled to exactly host:port, expecting
        node_id's key: what proves a record's address reachable (a
        connection the peer opened proves nothing about its address)."""
        conn = self.pool.connection(node_id)
        if conn is not None and conn.tls_client and _peer_address(conn) == (host, port):
            return defer.succeed(conn)
        if conn is None:
            # the pool's dial, to that address with that key: shared with a
            # lookup's FIND_NODE to the same node, and kept for it
            return self.pool.get(node_id, host, port)
        from flud.protocol.connection import dial
        d = dial(self.reactor, self.local, self.handler, host, port, expected_peer=node_id)

        def dialled(fresh):
            # the pool keeps the connection it had: this one only proves the address
            fresh.probe_only = self.pool.connection(node_id) is not fresh
            return fresh
        return d.addCallback(dialled)

    def _join_failed(self, failure):
        from twisted.python import log
        log.msg(f"joining through {self.join_address[0]}:{self.join_address[1]} "
                f"failed: {failure.getErrorMessage()}; will keep gossiping with "
                f"any peer that reaches us")

    def stopService(self):
        super().stopService()
        self.membership.stop()
        if self.prober is not None:
            self.prober.stop()
        self.reservation.stop()
        if self.relayed_dialer is not None:
            self.relayed_dialer.stop()
        unmapped = self.port_mapper.stop()   # the gateway drops our port (best effort)
        self.discovery.stop()
        self.leases.stop()
        self.compactions.stop()
        self.quota.stop()
        self.monitor.stop_sampling()
        self.monitor.close_log()
        self.pool.close_all()
        self.door.stop()
        d = self._listening.stopListening() if self._listening else None
        if not unmapped.called:       # the deletion's answer, waited for UNMAP_WAIT at most
            unmapped.addTimeout(UNMAP_WAIT, self.reactor).addErrback(lambda f: None)
            d = defer.gatherResults([d or defer.succeed(None), unmapped])
        self.workers.stop()
        self.store.close()
        try:
            os.unlink(os.path.join(self.home, "node.json"))
        except FileNotFoundError:
            pass
        return d

    def stats(self) -> dict:
        store = self.store.stats()
        self.monitor.sample()
        snap = self.monitor.snapshot()
        times = os.times()
        return {
            "node_id": self.node_id.hex(),
            "port": self.local.listen_port,
            "uptime": round(time.time() - self.started_at, 3),
            "peers_known": len(self.membership.peers),
            "peers_alive": len(self.membership.alive()),
            "records_refused": dict(self.membership.refused),
            "reachability": dict(self.prober.summary() if self.prober else {"verdict": "local"},
                                 dial_backs=self.handler.dial_back.counters),
            "port_mapping": self.port_mapper.summary(),
            "relay": dict(self.relay.stats(), reserved_on=(self.reservation.relay[0].hex()
                                                           if self.reservation.relay else None)),
            "punch": self.puncher.stats(),
            "dht": self.discovery.stats(),
            "connections": len(self.pool),
            # connections that have not said HELLO yet, and those closed at
            # the door for it (flud/node/gate.py)
            "unauthenticated": self.door.unauthenticated,
            "refused_before_hello": self.door.refused,
            "store": store,
            "leases": self.leases.stats(),
            "compaction": self.compactions.stats(),
            "ledger": self.quota.stats(),
            "roots": self.roots.count(),
            "cpu_seconds": round(times.user + times.system, 3),
            "memory": {k: v for k, v in snap.items() if k != "transfers"},
        }
