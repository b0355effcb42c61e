"""An iterative Kademlia lookup, sans I/O.

The caller asks `next_queries()` whom to ask (at most alpha at once, the
closest not yet asked among the k closest known), sends each a FIND_NODE,
and reports `answered(node_id, contacts)` (contacts whose records it
verified) or `failed(node_id)`. The lookup is done when the k closest
contacts it knows have all answered (or there is nobody left to ask), or as
soon as the target itself answered when `stop_at_target`. Bounded: at most
`max_queries` queries in all, whatever the answers say, so a hostile node
feeding endless made-up ids cannot keep a lookup going.
"""
from __future__ import annotations

from flud.overlay.routing import ALPHA, K

MAX_QUERIES = 64


class Lookup:
    def __init__(self, target: bytes, seeds, k: int = K, alpha: int = ALPHA,
                 stop_at_target: bool = False, max_queries: int = MAX_QUERIES,
                 claimed: set | None = None):
        """claimed: node ids taken by sibling lookups (DisjointLookup): this
        one never asks them, so no node sits on two paths."""
        self.target = target
        self.target_int = int.from_bytes(target, "big")
        self.k = k
        self.alpha = alpha
        self.stop_at_target = stop_at_target
        self.max_queries = max_queries
        self.known = {}          # node id -> Contact
        self.depth = {}          # node id -> hops from the seeds
        self.asked = set()
        self.in_flight = set()
        self.answered_ids = set()
        self.failed_ids = set()
        self.found = None        # the target's own contact, once it answered
        self.claimed = claimed if claimed is not None else set()
        for contact in seeds:
            self._learn(contact, 0)

    def _distance(self, node_id: bytes) -> int:
        return self.known[node_id].number ^ self.target_int

    def _learn(self, contact, depth) -> None:
        if contact.node_id not in self.known:
            self.known[contact.node_id] = contact
            self.depth[contact.node_id] = depth

    def _candidates(self) -> list:
        claimed = self.claimed
        live = [nid for nid in self.known if nid not in self.failed_ids
                and (nid in self.asked or nid not in claimed)]
        live.sort(key=self._distance)
        return live[:self.k]

    def next_queries(self) -> list:
        if self.done:
            return []
        room = self.alpha - len(self.in_flight)
        picked = []
        for node_id in self._candidates():
            if room <= 0 or len(self.asked) >= self.max_queries:
                break
            if node_id not in self.asked:
                self.asked.add(node_id)
                self.claimed.add(node_id)
                self.in_flight.add(node_id)
                picked.append(self.known[node_id])
                room -= 1
        return picked

    def answered(self, node_id: bytes, contacts) -> None:
        self.in_flight.discard(node_id)
        self.answered_ids.add(node_id)
        if node_id == self.target:
            self.found = self.known.get(node_id)
        depth = self.depth.get(node_id, 0) + 1
        for contact in contacts:
            self._learn(contact, depth)

    def failed(self, node_id: bytes) -> None:
        self.in_flight.discard(node_id)
        self.failed_ids.add(node_id)

    @property
    def done(self) -> bool:
        if self.stop_at_target and self.found is not None:
            return True
        if self.in_flight:
            return False
        if len(self.asked) >= self.max_queries:
            return True
        return all(nid in self.asked for nid in self._candidates())

    @property
    def hops(self) -> int:
        """Hops to the target (when found), else to the farthest answer."""
        if self.found is not None:
            return self.depth[self.target]
        return max((self.depth[n] for n in self.answered_ids), default=0)

    def result(self) -> list:
        """The k closest contacts that answered, nearest first."""
        answered = sorted(self.answered_ids, key=self._distance)[:self.k]
        return [self.known[nid] for nid in answered]


DISJOINT_PATHS = 3


class DisjointLookup:
    """S/Kademlia's disjoint paths: `paths` lookups at once, the seeds dealt
    out between them, and no node asked by two of them. A hostile node can
    steer only the path that asked it; the target is found when any one
    path reaches it, so a lookup is misdirected only if hostile nodes sit
    on every path. Same interface as Lookup (next_queries, answered,
    failed, done, found, hops, result, asked)."""

    def __init__(self, target: bytes, seeds, paths: int = DISJOINT_PATHS, k: int = K,
                 alpha: int = ALPHA, stop_at_target: bool = False,
                 max_queries: int = MAX_QUERIES):
        self.target = target
        self.stop_at_target = stop_at_target
        seeds = sorted(seeds, key=lambda c: int.from_bytes(c.node_id, "big")
                       ^ int.from_bytes(target, "big"))
        claimed = set()
        share = max(1, max_queries // paths)
        self.paths = [Lookup(target, seeds[i::paths], k, alpha, stop_at_target, share, claimed)
                      for i in range(min(paths, len(seeds)) or 1)]
        self._owner = {}         # node id -> the path that asked it

    @property
    def asked(self) -> set:
        return set().union(*(p.asked for p in self.paths))

    @property
    def found(self):
        return next((p.found for p in self.paths if p.found is not None), None)

    def next_queries(self) -> list:
        if self.done:
            return []
        picked = []
        for path in self.paths:
            for contact in path.next_queries():
                self._owner[contact.node_id] = path
                picked.append(contact)
        return picked

    def answered(self, node_id: bytes, contacts) -> None:
        path = self._owner.pop(node_id, None)
        if path is not None:
            path.answered(node_id, contacts)

    def failed(self, node_id: bytes) -> None:
        path = self._owner.pop(node_id, None)
        if path is not None:
            path.failed(node_id)

    @property
    def done(self) -> bool:
        if self.stop_at_target and self.found is not None:
            return True
        return all(p.done for p in self.paths)

    @property
    def hops(self) -> int:
        hops = [p.hops for p in self.paths if p.found is not None]
        return min(hops) if hops else max(p.hops for p in self.paths)

    def result(self) -> list:
        """The k closest contacts that answered on any path, nearest first."""
        merged = {}
        for path in self.paths:
            for contact in path.result():
                merged[contact.node_id] = contact
        target = int.from_bytes(self.target, "big")
        ordered = sorted(merged.values(), key=lambda c: int.from_bytes(c.node_id, "big") ^ target)
        return ordered[:self.paths[0].k]
