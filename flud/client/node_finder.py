"""The client's use of the DHT: finding a node by id, and sampling nodes by
random walks.

A client routes nobody; it asks nodes FIND_NODE (flud/protocol/find_node.py
drives the overlay's lookups). Every record an answer names is checked
(signature, expiry) before it is used; the highest sequence of a node's
record wins, so a holder that moved is found at its new address by its id.

- find(node_id): an S/Kademlia lookup on disjoint paths (DisjointLookup),
  stopped when the node itself answers at the address its newest record
  names: a hostile node on one path cannot hide it.
- walk(count): lookups of random ids; each node that answered one is a
  candidate (it proved its key at its record's address). Placement ranks
  this sample instead of needing every node of the network.
"""
import os

from twisted.internet import defer

from flud.overlay.lookup import DisjointLookup, Lookup
from flud.overlay.routing import K, Contact, subnet_of
from flud.protocol.find_node import QUERY_TIMEOUT, RecordChecker, drive

RANDOM_WALKS = 4
MAX_KNOWN = 4096       # records kept (the oldest-learned dropped first)


class NodeFinder:
    def __init__(self, clock, find_node, rng=None):
        """find_node(node_id, host, port, target) -> Deferred[list of
        NodeRecord] (unchecked): one FIND_NODE to the node at that address."""
        self.clock = clock
        self.find_node = find_node
        self.rng = rng
        self.checker = RecordChecker()
        self.records = {}      # node id -> newest checked NodeRecord
        self.answered = set()  # ids of nodes that answered a FIND_NODE of ours
        self.lookups = 0

    def learn(self, records) -> list:
        """Keep the newest checked record of each node; returns those taken."""
        taken = []
        for record in self.checker.check(records, self.clock.seconds()):
            held = self.records.get(record.node_id)
            if held is None or record.sequence > held.sequence:
                if held is None and len(self.records) >= MAX_KNOWN:
                    self.records.pop(next(iter(self.records)))
                self.records[record.node_id] = record
                taken.append(record)
        return taken

    def _contact(self, record) -> Contact:
        return Contact(record.node_id, subnet_of(record.first_tcp()[0]), record)

    def seeds(self, target: bytes, count: int = K) -> list:
        number = int.from_bytes(target, "big")
        nearest = sorted(self.records.values(),
                         key=lambda r: int.from_bytes(r.node_id, "big") ^ number)
        return [self._contact(r) for r in nearest[:count]]

    def _ask(self, contact, target):
        record = self.records.get(contact.node_id, contact.record)
        host, port = record.first_tcp()
        d = self.find_node(contact.node_id, host, port, target)
        d.addTimeout(QUERY_TIMEOUT, self.clock)

        def answered(records):
            if self.records.get(contact.node_id) is record:
                self.answered.add(contact.node_id)
            self.learn(records)
            return [self._contact(self.records[r.node_id]) for r in records
                    if r.node_id in self.records]
        return d.addCallback(answered)

    def lookup(self, target: bytes, disjoint: bool = False,
               stop_at_target: bool = False) -> defer.Deferred:
        self.lookups += 1
        seeds = self.seeds(target, 2 * K if disjoint else K)
        run = (DisjointLookup(target, seeds, stop_at_target=stop_at_target) if disjoint
               else Lookup(target, seeds, stop_at_target=stop_at_target))
        return drive(run, lambda contact: self._ask(contact, target))

    @defer.inlineCallbacks
    def find(self, node_id: bytes):
        """The newest record of node_id whose node answered at its address,
        or None if no path reached it."""
        tried = self.records.get(node_id)
        if node_id in self.answered and tried is not None:
            return tried     # it answered at that record's address in this run
        run = yield self.lookup(node_id, disjoint=True, stop_at_target=True)
        if run.found is not None:
            return self.records.get(node_id)
        newest = self.records.get(node_id)
        if newest is None or (tried is not None and newest.sequence <= tried.sequence):
            return None
        # Its newer record came in during the lookup (the lookup had tried
        # it at the address it had): ask it once where that record says.
        try:
            yield self._ask(self._contact(newest), node_id)
        except Exception:
            return None
        return newest

    @defer.inlineCallbacks
    def walk(self, count: int = RANDOM_WALKS):
        """`count` lookups of random ids; fires with the ids that answered."""
        targets = [os.urandom(32) if self.rng is None else self.rng.randbytes(32)
                   for _ in range(count)]
        yield defer.DeferredList([self.lookup(t) for t in targets], consumeErrors=True)
        return set(self.answered)
