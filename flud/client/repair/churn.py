"""The churn simulation: a year of nodes leaving and joining, with checks
and repairs, on a simulated clock (pure: no network, no sleeps).

Nodes live in houses of `house_size` (a family's machines behind one
router and one power line): what happens to one node of a house happens to
all of them at once. Each week p of the nodes leave for good (a running
total, in whole houses: 2% of 50 nodes in houses of 3 is a house about
every three weeks) at random moments of the week, and as many new, empty
nodes join as a new house. Optionally some houses go away for a while and
come back (`outage_per_week` of the nodes, for `outage_days`: a power cut,
a holiday). Checks run every `check_every` seconds; each sees which holder
nodes answer, and the real health rules (health.py: grace, m, the safety
margin) and placement (plan.py, which knows nothing of houses) decide what
is re-created and where. An object is lost when fewer than k of its shares
are left on nodes that still exist (or will come back), whatever the
checks know; it is unavailable at a check that finds fewer than k of its
shares on nodes that answer (a restore then would fail). Traffic is
counted in shares: a repair fetches k shares and stores each re-created one.
"""
import heapq
import random
from typing import NamedTuple

from flud.client.records import ShareHolder
from flud.client.repair.object_health import (DAY, OK, SAFETY_MARGIN, UNREACHABLE, HealthBook,
                                       Observation, RepairPolicy, StoredObject)
from flud.client.repair.repair_plan import place

WEEK = 7 * DAY
GIB = 1 << 30

_LEAVE, _JOIN, _DOWN, _UP, _CHECK = range(5)


class ChurnConfig(NamedTuple):
    nodes: int = 50
    objects: int = 2000
    k: int = 4
    n: int = 8
    m: int = 7
    loss_per_week: float = 0.02
    weeks: int = 52
    check_every: float = WEEK
    grace: float = 3 * DAY
    object_bytes: int = 32 << 20      # an extent: 32 MiB of segments
    outage_per_week: float = 0.0      # nodes away for a while each week
    outage_days: float = 5.0
    seed: int = 1
    repair: bool = True               # False: checks only (the baseline)
    margin: int = SAFETY_MARGIN       # repair at k + margin confirmed whatever the grace
    house_size: int = 1               # nodes that leave and go down together


class ChurnResult(NamedTuple):
    config: ChurnConfig
    lost: int                         # objects with fewer than k shares left
    departed: int                     # nodes that left for good
    recreated: list                   # shares re-created, per week
    fetched: list                     # shares fetched for repairs, per week
    repairs: int                      # objects repaired (repair events)
    fewest_shares: int                # the fewest shares an object had left
    outages: int                      # nodes away for a while
    surplus: int                      # copies on nodes that came back after a repair
    overcounted: int                  # objects ever counted with more than n shares (must be 0)
    unavailable: int = 0              # objects a check found with fewer than k answering

    @property
    def share_bytes(self) -> int:
        return self.config.object_bytes // self.config.k

    def per_week(self, counts) -> float:
        return sum(counts) / max(1, len(counts))

    def recreated_bytes_per_gib_week(self) -> float:
        """Bytes re-created a week per GiB backed up (before coding)."""
        stored = self.config.objects * self.config.object_bytes / GIB
        return self.per_week(self.recreated) * self.share_bytes / stored

    def fetched_bytes_per_gib_week(self) -> float:
        stored = self.config.objects * self.config.object_bytes / GIB
        return self.per_week(self.fetched) * self.share_bytes / stored


class _World:
    def __init__(self, config: ChurnConfig):
        self.c = config
        self.rng = random.Random(config.seed)
        self.book = HealthBook()
        self.policy = RepairPolicy(m=config.m, grace=config.grace, margin=config.margin)
        self.live = set()            # nodes that exist and answer
        self.away = set()            # nodes away for a while (will come back)
        self.gone = set()
        self.next_node = 0
        self.houses = []             # [[node, ...]] in the order they joined
        self.unavailable = set()
        self.objects = {}            # id -> StoredObject
        self.by_node = {}            # node -> set of object ids it holds a share of
        self.load = {}
        self.affected = set()        # objects with a share on a node not live
        self.lost = set()
        self.fewest = config.n
        self.overcounted = 0
        self.repairs = 0
        self.surplus = 0
        for _ in range(-(-config.nodes // config.house_size)):
            self.join_house()
        nodes = sorted(self.live)
        for i in range(config.objects):
            holders = self.rng.sample(nodes, config.n)
            oid = f"{i:064x}"
            shares = tuple(ShareHolder(j, f"{i:056x}{j:08x}", node)
                           for j, node in enumerate(holders))
            self._set(StoredObject(oid, "extent", config.k, config.n, shares))

    def join_house(self) -> None:
        house = []
        for _ in range(self.c.house_size):
            node = f"{self.next_node:064x}"
            self.next_node += 1
            self.live.add(node)
            self.by_node[node] = set()
            self.load[node] = 0
            house.append(node)
        self.houses.append(house)

    def house_of(self, node: str) -> list:
        return next(house for house in self.houses if node in house)

    def _set(self, obj: StoredObject) -> None:
        old = self.objects.get(obj.object_id)
        for share in old.shares if old else ():
            self.by_node[share.node].discard(obj.object_id)
            self.load[share.node] -= 1
        self.objects[obj.object_id] = obj
        for share in obj.shares:
            self.by_node[share.node].add(obj.object_id)
            self.load[share.node] += 1

    def left(self, obj: StoredObject) -> int:
        return sum(1 for s in obj.shares if s.node in self.live or s.node in self.away)

    def leave(self, node: str) -> None:
        self.live.discard(node)
        self.away.discard(node)
        self.gone.add(node)
        for oid in self.by_node[node]:
            self.affected.add(oid)
            if oid not in self.lost:
                left = self.left(self.objects[oid])
                self.fewest = min(self.fewest, left)
                if left < self.c.k:
                    self.lost.add(oid)

    def down(self, node: str) -> None:
        self.live.discard(node)
        self.away.add(node)
        self.affected.update(self.by_node[node])

    def up(self, node: str) -> None:
        if node in self.away:
            self.away.discard(node)
            self.live.add(node)

    def check(self, now: float) -> tuple:
        """(shares re-created, shares fetched) by this check's repairs."""
        holders = {s.node for oid in self.affected for s in self.objects[oid].shares}
        holders |= {node for _key, node in self.book.superseded}
        for node in holders:
            seen = OK if node in self.live else UNREACHABLE
            self.book.observe(Observation("", node, seen, now))
        self.surplus = sum(1 for _k, node in self.book.superseded if node in self.live)
        candidates = sorted(n for n in self.live if n not in self.book.unreachable_since)
        made = fetched = 0
        for oid in sorted(self.affected):
            if oid in self.lost:
                continue
            obj = self.objects[oid]
            health = self.book.classify(obj, now, self.policy)
            if health.healthy < self.c.k:
                self.unavailable.add(oid)
            if health.healthy + health.unreachable > self.c.n:
                self.overcounted += 1
            wanted = health.to_recreate() if self.c.repair else ()
            if wanted:
                placed, _ = place([(obj, list(wanted))], candidates, self.load)
                new = {p.index: p.node for p in placed}
                for share in obj.shares:
                    if share.index in new:
                        self.book.moved(oid, share, new[share.index])
                obj = obj._replace(shares=tuple(ShareHolder(s.index, s.key,
                                                            new.get(s.index, s.node))
                                                for s in obj.shares))
                self._set(obj)
                made += len(placed)
                fetched += self.c.k
                self.repairs += 1
            if all(s.node in self.live for s in obj.shares):
                self.affected.discard(oid)
        return made, fetched


def _schedule(config: ChurnConfig, rng: random.Random) -> list:
    """The year's events as a heap of (time, sequence, kind, node)."""
    events, owed, outages_owed = [], 0.0, 0.0
    size = config.house_size
    for week in range(config.weeks):
        start = week * WEEK
        owed += config.loss_per_week * config.nodes
        outages_owed += config.outage_per_week * config.nodes
        for kind, count in ((_LEAVE, int(owed // size)), (_DOWN, int(outages_owed // size))):
            for _ in range(count):
                events.append((start + rng.random() * WEEK, len(events), kind, ""))
        owed -= size * int(owed // size)
        outages_owed -= size * int(outages_owed // size)
    for j in range(1, int(config.weeks * WEEK // config.check_every) + 1):
        events.append((j * config.check_every, len(events), _CHECK, ""))
    heapq.heapify(events)
    return events


def simulate(config: ChurnConfig) -> ChurnResult:
    world = _World(config)
    rng = world.rng
    events = _schedule(config, rng)
    sequence = len(events)
    recreated = [0] * config.weeks
    fetched = [0] * config.weeks
    departed = outages = 0
    while events:
        now, _, kind, node = heapq.heappop(events)
        if kind == _LEAVE:
            house = world.house_of(rng.choice(sorted(world.live | world.away)))
            for gone in house:
                world.leave(gone)
            world.houses.remove(house)
            world.join_house()
            departed += len(house)
        elif kind == _DOWN and world.live:
            house = world.house_of(rng.choice(sorted(world.live)))
            for node in house:
                if node in world.live:
                    world.down(node)
                    outages += 1
                    sequence += 1
                    heapq.heappush(events, (now + config.outage_days * DAY, sequence, _UP,
                                            node))
        elif kind == _UP:
            world.up(node)
        elif kind == _CHECK:
            made, got = world.check(now)
            week = min(config.weeks - 1, int(now // WEEK) - 1)
            recreated[week] += made
            fetched[week] += got
    return ChurnResult(config, len(world.lost), departed, recreated, fetched, world.repairs,
                       world.fewest, outages, world.surplus, world.overcounted,
                       len(world.unavailable - world.lost))
