"""The overlay's logic at a scale one machine cannot run as processes: a
population of nodes, each with its own RoutingTable, joining and answering
FIND_NODE by the same Lookup state machine the real node and client use,
on a simulated clock, with churn, and with a hostile population that
colludes: every hostile node answers FIND_NODE with the hostile ids nearest
the target (it cannot answer with honest records: it cannot sign them), and
an eclipse attacker grinds ids close to one victim. Signatures are modelled,
not computed: a contact here is what a checked record would be.

Pure: no I/O; tools/dht_sim.py prints its figures.
"""
from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass, field

from flud.overlay.lookup import DisjointLookup, Lookup
from flud.overlay.routing import K, Contact, RoutingTable


REFRESH_AT_JOIN = 2
# Each hour this share of live nodes refreshes one bucket (libp2p refreshes
# every bucket each 10 minutes: far more; the weaker assumption keeps the
# simulation affordable and still has to pass).
REFRESH_SHARE_PER_HOUR = 0.1


@dataclass
class SimNode:
    node_id: bytes
    subnet: str
    hostile: bool = False
    up: bool = True
    table: RoutingTable | None = None


@dataclass
class Figures:
    lookups: int = 0
    found: int = 0
    misdirected: int = 0
    hops: list = field(default_factory=list)
    queries: list = field(default_factory=list)
    eclipse_lookups: int = 0
    eclipse_found: int = 0

    def summary(self) -> dict:
        hops = sorted(self.hops) or [0]
        return {
            "lookups": self.lookups, "found": self.found, "misdirected": self.misdirected,
            "hops_median": statistics.median(hops),
            "hops_p99": hops[min(len(hops) - 1, int(len(hops) * 0.99))],
            "queries_median": statistics.median(self.queries or [0]),
            "eclipse_lookups": self.eclipse_lookups, "eclipse_found": self.eclipse_found,
        }


class Population:
    def __init__(self, rng: random.Random, diversity: bool = True):
        self.rng = rng
        self.diversity = diversity
        self.nodes = {}
        self.hostile_ids = []
        self.hostile_numbers = []     # (id as an integer, id), for the colluders' answers
        self.honest = []          # every honest node ever added, up or not

    # ---- membership --------------------------------------------------------

    def new_id(self, near: bytes | None = None, bits: int = 0) -> bytes:
        raw = bytearray(self.rng.randbytes(32))
        if near is not None:               # an id ground to share `bits` with `near`
            whole, rest = divmod(bits, 8)
            raw[:whole] = near[:whole]
            if rest:
                mask = (0xFF << (8 - rest)) & 0xFF
                raw[whole] = (near[whole] & mask) | (raw[whole] & ~mask & 0xFF)
        return bytes(raw)

    def add(self, node_id: bytes, subnet: str, hostile: bool = False) -> SimNode:
        node = SimNode(node_id, subnet, hostile,
                       table=RoutingTable(node_id, diversity=self.diversity))
        self.nodes[node_id] = node
        if hostile:
            self.hostile_ids.append(node_id)
            self.hostile_numbers.append((int.from_bytes(node_id, "big"), node_id))
        else:
            self.honest.append(node)
        return node

    def contact(self, node: SimNode) -> Contact:
        return Contact(node.node_id, node.subnet if self.diversity else "")

    def join(self, node: SimNode, via: SimNode, now: float) -> None:
        """Kademlia's join: the node it knows, a lookup of its own id (which
        tells its neighbours about it), then a refresh of its farther
        buckets (a lookup of a random id in each, at most REFRESH_AT_JOIN)."""
        node.table.offer(self.contact(via), now)
        self.lookup(node, node.node_id, now)
        self.refresh(node, now, REFRESH_AT_JOIN)

    def refresh(self, node: SimNode, now: float, count: int) -> None:
        nearest = node.table.nearest_bucket()
        for index in range(min(nearest, count)):
            self.lookup(node, node.table.random_id_in_bucket(index, self.rng), now)

    def leave(self, node: SimNode) -> None:
        node.up = False

    # ---- FIND_NODE -----------------------------------------------------------

    def find_node(self, asked: SimNode, asker: SimNode, target: bytes, now: float) -> list:
        if not asked.hostile:
            # a node that is asked learns the asker (it just proved itself)
            self._offer(asked, asker, now)
            return asked.table.closest(target, K)
        target_int = int.from_bytes(target, "big")
        nearest = heapq.nsmallest(K, self.hostile_numbers, key=lambda pair: pair[0] ^ target_int)
        return [self.contact(self.nodes[nid]) for _, nid in nearest]

    def _offer(self, table_owner: SimNode, node: SimNode, now: float) -> None:
        offered = table_owner.table.offer(self.contact(node), now)
        if offered.outcome == "full":
            oldest = self.nodes.get(offered.ping.node_id)
            table_owner.table.ping_result(offered.ping.node_id, bool(oldest and oldest.up), now)

    def lookup(self, source: SimNode, target: bytes, now: float, stop_at_target=False,
               disjoint: bool = False) -> Lookup:
        """disjoint: S/Kademlia's disjoint paths (what a client's find uses),
        seeded with 2k contacts so each path starts from its own."""
        if disjoint:
            run = DisjointLookup(target, source.table.closest(target, 2 * K),
                                 stop_at_target=stop_at_target)
        else:
            run = Lookup(target, source.table.closest(target, K), stop_at_target=stop_at_target)
        while not run.done:
            batch = run.next_queries()
            if not batch:
                break
            for contact in batch:
                asked = self.nodes.get(contact.node_id)
                if asked is None or not asked.up:
                    run.failed(contact.node_id)
                    source.table.remove(contact.node_id)
                    continue
                answer = self.find_node(asked, source, target, now)
                run.answered(contact.node_id, answer)
                self._offer(source, asked, now)
                # contacts learned go into the table once a ping says they
                # are there (the table holds only nodes verified reachable)
                for learned in answer:
                    node = self.nodes.get(learned.node_id)
                    if node is not None and node.up and source.table.get(node.node_id) is None:
                        self._offer(source, node, now)
        return run


def run_simulation(nodes: int = 10_000, hostile: float = 0.10, churn_per_day: float = 0.20,
                   hours: int = 24, lookups_per_hour: int = 200, eclipse_bits: int = 16,
                   hostile_subnets: int = 8, seed: int = 1, diversity: bool = True,
                   disjoint: bool = True, progress=None) -> dict:
    rng = random.Random(seed)
    pop = Population(rng, diversity=diversity)
    figures = Figures()
    now = 0.0
    honest_count = int(nodes * (1 - hostile))
    victim = None
    first = None
    for i in range(honest_count):
        node = pop.add(pop.new_id(), f"h{rng.randrange(1 << 20)}")
        if first is None:
            first = node
        else:
            pop.join(node, node_from(pop, rng, node), now)
        if victim is None:
            victim = node
        if progress and i % 1000 == 0:
            progress(f"joined {i} honest nodes")
    # The attackers: a share of them ground close to the victim (an eclipse
    # attempt), the rest spread; all on a few subnets (one operator).
    for i in range(nodes - honest_count):
        near = victim.node_id if i % 2 == 0 else None
        node = pop.add(pop.new_id(near, eclipse_bits), f"x{i % hostile_subnets}", hostile=True)
        pop.join(node, node_from(pop, rng, node), now)
    if progress:
        progress("population joined")
    leave_per_hour = churn_per_day / 24
    for hour in range(hours):
        now = hour * 3600.0
        honest_up = [n for n in pop.honest if n.up]
        for node in rng.sample(honest_up, int(len(honest_up) * leave_per_hour)):
            if node is not victim:
                pop.leave(node)
            newcomer = pop.add(pop.new_id(), f"h{rng.randrange(1 << 20)}")
            pop.join(newcomer, node_from(pop, rng, newcomer), now)
        honest_up = [n for n in pop.honest if n.up]
        for node in rng.sample(honest_up, int(len(honest_up) * REFRESH_SHARE_PER_HOUR)):
            index = rng.randrange(max(1, node.table.nearest_bucket()))
            pop.lookup(node, node.table.random_id_in_bucket(index, rng), now)
        for _ in range(lookups_per_hour):
            source, target = rng.sample(honest_up, 2)
            eclipse = rng.random() < 0.1
            if eclipse:
                target = victim
            run = pop.lookup(source, target.node_id, now, stop_at_target=True,
                             disjoint=disjoint)
            figures.lookups += 1
            figures.queries.append(len(run.asked))
            if eclipse:
                figures.eclipse_lookups += 1
            if run.found is not None:
                figures.found += 1
                figures.hops.append(run.hops)
                if eclipse:
                    figures.eclipse_found += 1
            else:
                figures.misdirected += 1   # a live target that was not reached
        if progress:
            progress(f"hour {hour + 1}/{hours}: {figures.found}/{figures.lookups} found")
    result = figures.summary()
    result.update(nodes=nodes, hostile=hostile, churn_per_day=churn_per_day, hours=hours,
                  live_nodes=sum(1 for n in pop.nodes.values() if n.up),
                  diversity=diversity, disjoint=disjoint, seed=seed)
    return result


def node_from(pop: Population, rng: random.Random, joiner: SimNode) -> SimNode:
    """A random live honest node, other than the joiner, to join through."""
    while True:
        node = rng.choice(pop.honest)
        if node.up and node is not joiner:
            return node
