"""Give to get over a population, on a simulated clock (docs/quotas.md).

Every node runs the real arithmetic of flud/trust/ledger.py (admit,
claims_wanted, next_claim_size) on its own books; nothing here is taken on
a peer's word: a claim counts for its owner only once the node that placed
it checked it, and a holder that throws claims away fails that check.

The population, one participant per id:
- honest: runs a node of `capacity` bytes, linked to its owner, keeps the
  claims others place on it;
- liar: runs a node and links it, but throws away every claim (its checks
  fail: it earns nothing);
- free rider: runs no node.
Every owner backs up `daily` bytes a day (one object, k-of-n shares) and
would store more if it could: a share goes to a random node that admits
it (a QUOTA or a full node: the client tries another, up to `tries`).
Each day each node settles claims for the owners it took data from that
day; a claim is checked when it is placed and every `check_days` after.

Pure: one random.Random(seed), integers for bytes, days for time.
"""
import random
from dataclasses import dataclass, field

from flud.trust import ledger
from flud.trust.ledger import QuotaTerms

HONEST, LIAR, FREE_RIDER = "honest", "liar", "free rider"
MAX_FAILURES = 3       # as flud/node/quota.py: failed checks before a claim is dropped


@dataclass
class SimConfig:
    nodes: int = 1000
    days: int = 365
    free_riders: float = 0.10
    liars: float = 0.10
    grant: int = 4 << 20
    ratio: float = 1.0
    capacity: int = 32 << 30
    daily: int = 16 << 20       # bytes of backup an owner adds each day (before coding)
    k: int = 4
    n: int = 8
    tries: int = 24
    check_days: int = 7
    seed: int = 1


@dataclass
class Participant:
    index: int
    kind: str
    used: int = 0                # bytes on its node (shares of others + claims)
    stored: int = 0              # bytes of shares it placed on the network
    wanted: int = 0              # bytes of shares it tried to place
    given: int = 0               # bytes of claims it holds for others (verified)
    held: dict = field(default_factory=dict)      # owner -> bytes this node holds for it
    claims: dict = field(default_factory=dict)    # owner -> [verified bytes, failing bytes, failures]


class LedgerSim:
    def __init__(self, config: SimConfig):
        self.config = config
        self.rng = random.Random(config.seed)
        kinds = ([FREE_RIDER] * int(config.nodes * config.free_riders)
                 + [LIAR] * int(config.nodes * config.liars))
        kinds += [HONEST] * (config.nodes - len(kinds))
        self.rng.shuffle(kinds)
        self.people = [Participant(i, kind) for i, kind in enumerate(kinds)]
        self.hosts = [p for p in self.people if p.kind != FREE_RIDER]
        self.terms = QuotaTerms(grant=config.grant, ratio=config.ratio)
        self.refused_quota = 0
        self.refused_full = 0
        self.day = 0

    # ---- one day -------------------------------------------------------------

    def run(self, days: int | None = None):
        for _ in range(days if days is not None else self.config.days):
            self.step()
        return self.summary()

    def step(self) -> None:
        touched = set()
        for owner in self.people:
            self._backup(owner, touched)
        for host_index, owner_index in touched:
            self._settle_claims(self.people[host_index], self.people[owner_index])
        if self.day % self.config.check_days == 0:
            self._check_failing()
        self.day += 1

    def _backup(self, owner: Participant, touched: set) -> None:
        c = self.config
        share = c.daily // c.k
        owner.wanted += share * c.n
        placed = []
        for _ in range(c.tries):
            if len(placed) == c.n:
                break
            host = self.rng.choice(self.hosts)
            if host is owner or host in placed:
                continue
            if not self._admit(host, owner, share):
                continue
            placed.append(host)
        if len(placed) < c.n:             # the object does not go: what landed is given back
            for host in placed:
                host.held[owner.index] -= share
                host.used -= share
            return
        for host in placed:
            touched.add((host.index, owner.index))
        owner.stored += share * c.n

    def _admit(self, host: Participant, owner: Participant, size: int) -> bool:
        held = host.held.get(owner.index, 0)
        verified = host.claims.get(owner.index, [0, 0, 0])[0]
        if ledger.admit(self.terms, b"%d" % owner.index, held, verified, size) is not None:
            self.refused_quota += 1
            return False
        if host.used + size > self.config.capacity:
            self.refused_full += 1
            return False
        host.held[owner.index] = held + size
        host.used += size
        return True

    # ---- claims: placed by `host` on `owner`'s linked node ---------------------

    def _settle_claims(self, host: Participant, owner: Participant) -> None:
        if owner.kind == FREE_RIDER or owner is host:
            return
        book = host.claims.setdefault(owner.index, [0, 0, 0])
        if book[1]:
            return                         # a failing claim blocks new ones until dropped
        wanted = ledger.claims_wanted(self.terms, b"%d" % owner.index, host.held[owner.index])
        while size := ledger.next_claim_size(wanted, book[0] + book[1]):
            if owner.used + size > self.config.capacity:
                return                     # its node is full: NO_SPACE, no credit
            if owner.kind == LIAR:         # accepted, thrown away, found at the first check
                book[1], book[2] = size, 1
                return
            owner.used += size
            owner.given += size
            book[0] += size                # kept, and this node's check passed

    def _check_failing(self) -> None:
        for host in self.hosts:
            for book in host.claims.values():
                if book[1]:
                    book[2] += 1
                    if book[2] >= MAX_FAILURES:
                        book[1] = book[2] = 0   # dropped

    # ---- figures ---------------------------------------------------------------

    def summary(self) -> dict:
        c = self.config
        by_kind = {}
        for kind in (HONEST, LIAR, FREE_RIDER):
            people = [p for p in self.people if p.kind == kind]
            if not people:
                continue
            stored = sum(p.stored for p in people)
            given = sum(p.given for p in people)
            max_held = max((h.held.get(p.index, 0) for p in people for h in self.hosts), default=0)
            by_kind[kind] = {
                "owners": len(people),
                "stored_per_owner": stored // len(people),
                "wanted_per_owner": sum(p.wanted for p in people) // len(people),
                "given_per_owner": given // len(people),
                "stored_over_given": round(stored / given, 3) if given else None,
                "max_held_on_one_node": max_held,
                "nodes_holding_per_owner": round(sum(
                    sum(1 for h in self.hosts if h.held.get(p.index, 0)) for p in people)
                    / len(people), 1),
            }
        return {"days": self.day, "nodes": c.nodes, "grant": c.grant, "ratio": c.ratio,
                "refused_quota": self.refused_quota, "refused_full": self.refused_full,
                "kinds": by_kind}
