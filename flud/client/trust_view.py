"""What this home knows about whom to trust, for one run: placement's
candidates (address, reputation, vetting, certificate), and the run's own
observations written back to the reputation store.

The rules themselves are pure (flud/trust/); this is the glue between them
and the home's files (reputation.sqlite, friends.json). Network.place()
asks choose(); the check job reports what its challenges found (observed)
and asks which nodes to move data off (below_threshold); the composition
root calls end_run() with what the run's requests did.
"""
import time

from flud.client.friends_store import FriendsStore
from flud.client.reputation_store import ReputationStore
from flud.trust.placement_rules import (
    Candidate, PlacementPolicy, choose, diversity_group, diversity_on)
from flud.trust.reputation import (
    DOWN, REQUEST_FAILED, REQUEST_OK, UP, VERIFY_FAILED, VERIFY_OK)

# What a check's outcome says of the node (object_health's outcome names).
_VERIFY_KINDS = {"ok": VERIFY_OK, "corrupt": VERIFY_FAILED, "missing": VERIFY_FAILED}


class TrustView:
    def __init__(self, reputation: ReputationStore, friends: FriendsStore = None,
                 clock=time.time, policy: PlacementPolicy = None):
        self.reputation = reputation
        self.friends = friends
        self.clock = clock
        friends_only = friends is not None and friends.friends_only
        self.policy = policy or PlacementPolicy(friends_only=friends_only)
        self.trusted = friends.trusted(clock()) if friends is not None else set()

    @classmethod
    def of_home(cls, home_path: str, identity, clock=time.time) -> "TrustView":
        return cls(ReputationStore(home_path), FriendsStore(home_path, identity), clock)

    @property
    def friends_only(self) -> bool:
        return self.policy.friends_only

    def candidates(self, nodes: dict, ids) -> list:
        """nodes: {node id: NodeAddress}; ids: the ones that may take shares."""
        now = self.clock()
        out = []
        for node_id in ids:
            standing = self.reputation.standing(node_id, now)
            # a node known without an address (an in-memory network) is this machine
            host = getattr(nodes[node_id], "host", "127.0.0.1")
            out.append(Candidate(node_id, host, standing.score(now),
                                 standing.vetted(now), node_id in self.trusted))
        return out

    def choose(self, object_id: bytes, nodes: dict, ids, count: int) -> list:
        return choose(object_id, self.candidates(nodes, ids), count, self.policy)

    def groups(self, nodes: dict) -> dict:
        """{node id hex: its diversity group}: one share of an object per
        group (each node its own group where diversity is off)."""
        candidates = self.candidates(nodes, list(nodes))
        if not diversity_on(candidates, self.policy):
            return {c.node_id.hex(): c.node_id.hex() for c in candidates}
        return {c.node_id.hex(): diversity_group(c.host) for c in candidates}

    def diverse(self, nodes: dict) -> bool:
        return diversity_on(self.candidates(nodes, list(nodes)), self.policy)

    def may_hold(self, node_id: bytes) -> bool:
        """May this node take new shares (score, certificate)?"""
        now = self.clock()
        if self.policy.friends_only and node_id not in self.trusted:
            return False
        return self.reputation.standing(node_id, now).score(now) >= self.policy.min_score

    def below_threshold(self, node_ids) -> set:
        """The nodes data is moved off: below the score, or (friends only)
        no longer certified."""
        return {nid for nid in node_ids if not self.may_hold(nid)}

    def observed(self, node_id: bytes, outcome: str) -> None:
        """A check's challenge of a share on this node found `outcome`."""
        kind = _VERIFY_KINDS.get(outcome)
        if kind is not None:
            self.reputation.record(node_id, kind, self.clock())

    def verified(self, per_node: dict) -> None:
        """`flud verify`'s counts per node (hex -> {"confirmed", "missing",
        "corrupt", ...}): one event per kind and node, weighted by count."""
        now = self.clock()
        for node_hex, counts in per_node.items():
            node_id = bytes.fromhex(node_hex)
            if counts.get("confirmed"):
                self.reputation.record(node_id, VERIFY_OK, now, counts["confirmed"])
            lost = counts.get("missing", 0) + counts.get("corrupt", 0)
            if lost:
                self.reputation.record(node_id, VERIFY_FAILED, now, lost)

    def end_run(self, outcomes: dict, failed) -> None:
        """outcomes: {node id: [requests answered, requests failed]} of this
        run; failed: the nodes the run gave up on. One event of each kind a
        node earned, per run: a big backup weighs as much as a small one."""
        now = self.clock()
        if not any(ok for ok, _ in outcomes.values()):
            return   # no node answered at all: this client was offline, not they
        for node_id, (ok, bad) in outcomes.items():
            if ok:
                self.reputation.record(node_id, UP, now)
                self.reputation.record(node_id, REQUEST_FAILED if node_id in failed or bad
                                       else REQUEST_OK, now)
            elif bad or node_id in failed:
                self.reputation.record(node_id, DOWN, now)

    def close(self) -> None:
        self.reputation.close()
