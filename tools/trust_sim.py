"""Trust simulation (issue 31), sans I/O on a simulated clock: placement
(flud/trust/placement_rules.py) and a client's reputation
(flud/trust/reputation.py) over a population of honest nodes, one Sybil
operator (one host, many ids) and flaky nodes, for a simulated year.

One client stores OBJECTS_PER_DAY new k-of-n objects a day. Every day it
checks a seventh of its shares (each share once a week, as `flud check`
rotates), records what it saw in its own standings of the nodes (VERIFY
passed or failed; the node up or down), re-creates lost shares, and moves
the shares off nodes whose score fell below MIN_SCORE (check --repair).

- honest nodes: on their own /24 (a few share one), down 2% of days, keep
  everything;
- the Sybil operator: SYBIL_SHARE of all ids on one host (one address),
  joining on day SYBIL_DAY, perfectly behaved (it wants to be trusted);
- flaky nodes: down 30% of days, and lose each share they hold with
  probability FLAKY_LOSS a day.

It reports the number of objects where the Sybil operator held more than
n - k shares at any time (the target is 0), its share of all placements,
the bytes lost on flaky nodes (shares they dropped, re-created from the
others) and how many days after joining reputation stopped placing on them,
and the same figures with the rules off (plain rendezvous by node id).

    python tools/trust_sim.py [--nodes 1000] [--days 365] [--seed 1] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass, field

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flud.trust.placement_rules import (  # noqa: E402
    MIN_SCORE, Candidate, PlacementPolicy, choose, diversity_group)
from flud.trust.reputation import (  # noqa: E402
    DAY, DOWN, UP, VERIFY_FAILED, VERIFY_OK, new_standing)

K, N = 4, 8
SHARE_BYTES = 2 * 1024 * 1024
OBJECTS_PER_DAY = 20
SYBIL_SHARE = 0.10
SYBIL_DAY = 30
FLAKY_SHARE = 0.05
FLAKY_DOWN = 0.30
FLAKY_LOSS = 0.01
HONEST_DOWN = 0.02
NEW_NODES_A_DAY = 0.5     # honest nodes joining after day 0 (they start unvetted)
CHECK_FRACTION = 1 / 7
T0 = 1_800_000_000.0


@dataclass
class SimNode:
    node_id: bytes
    kind: str                 # honest, sybil, flaky
    host: str
    joined: int               # day
    holds: set = field(default_factory=set)   # (object, index)
    up: bool = True


@dataclass
class Figures:
    objects: int = 0
    shares_placed: int = 0
    sybil_placed: int = 0
    sybil_over_limit: int = 0     # objects where the Sybil held > n - k shares at some time
    sybil_most: int = 0           # the most shares of one object it held
    flaky_bytes_lost: int = 0
    flaky_retired_after: list = field(default_factory=list)   # days from join to retired
    objects_lost: int = 0
    repaired_shares: int = 0
    moved_off_distrusted: int = 0

    def summary(self) -> dict:
        retired = sorted(self.flaky_retired_after)
        return {"objects": self.objects, "shares_placed": self.shares_placed,
                "sybil_share_of_placements": round(self.sybil_placed / max(1, self.shares_placed), 4),
                "objects_sybil_over_n_minus_k": self.sybil_over_limit,
                "sybil_most_shares_of_one_object": self.sybil_most,
                "flaky_bytes_lost": self.flaky_bytes_lost,
                "flaky_nodes_retired": len(retired),
                "flaky_days_to_retire_median": retired[len(retired) // 2] if retired else None,
                "objects_lost": self.objects_lost, "repaired_shares": self.repaired_shares,
                "shares_moved_off_distrusted": self.moved_off_distrusted}


class TrustSim:
    def __init__(self, nodes: int = 1000, days: int = 365, seed: int = 1, rules: bool = True,
                 objects_per_day: int = OBJECTS_PER_DAY, sybil_share: float = SYBIL_SHARE):
        self.rng = random.Random(seed)
        self.days, self.rules, self.objects_per_day = days, rules, objects_per_day
        self.nodes = {}
        self.standings = {}       # node id -> NodeStanding (the client's own view)
        self.objects = {}         # object id -> [node id or None per index]
        self.figures = Figures()
        self.retired = set()
        sybils = int(nodes * sybil_share)
        flaky = int(nodes * FLAKY_SHARE)
        honest = nodes - sybils - flaky
        for i in range(honest):
            self._add("honest", 0)
        for i in range(flaky):
            self._add("flaky", 0)
        self.sybils_left = sybils
        self.sybil_host = "198.51.100.7"

    def _add(self, kind: str, day: int) -> SimNode:
        node_id = self.rng.randbytes(32)
        if kind == "sybil":
            host = self.sybil_host
        else:   # most honest operators on their own /24; some share one
            host = f"{self.rng.randrange(1, 224)}.{self.rng.randrange(256)}." \
                   f"{self.rng.randrange(256)}.{self.rng.randrange(1, 255)}"
        node = SimNode(node_id, kind, host, day)
        self.nodes[node_id] = node
        if day == 0:   # known a long time: this client's history with it
            standing = new_standing(T0 - 60 * DAY).record(VERIFY_OK, T0 - 30 * DAY, 20)
            self.standings[node_id] = standing
        return node

    def now(self, day: int) -> float:
        return T0 + day * DAY

    # --- placement -----------------------------------------------------------

    def candidates(self, day: int) -> list:
        now = self.now(day)
        out = []
        for node in self.nodes.values():
            if not node.up:
                continue   # the client finds it failed this run
            standing = self.standings.get(node.node_id)
            if standing is None:
                standing = self.standings[node.node_id] = new_standing(now)
            out.append(Candidate(node.node_id, node.host, standing.score(now),
                                 standing.vetted(now)))
        return out

    def place(self, object_id: bytes, count: int, candidates, avoid_nodes=(), avoid_groups=()):
        pool = [c for c in candidates if c.node_id not in avoid_nodes
                and (not self.rules or diversity_group(c.host) not in avoid_groups)]
        if self.rules:
            return choose(object_id, pool, count, PlacementPolicy(diversity=True))
        from flud.client.placement import rank
        return rank(object_id, [c.node_id for c in pool])[:count]

    def _assign(self, object_id, index, node_id):
        self.objects[object_id][index] = node_id
        self.nodes[node_id].holds.add((object_id, index))
        self.figures.shares_placed += 1
        if self.nodes[node_id].kind == "sybil":
            self.figures.sybil_placed += 1

    def _sybil_count(self, object_id) -> int:
        return sum(1 for nid in self.objects[object_id]
                   if nid is not None and self.nodes[nid].kind == "sybil")

    def _note_sybil(self, object_id, over: set) -> None:
        held = self._sybil_count(object_id)
        self.figures.sybil_most = max(self.figures.sybil_most, held)
        if held > N - K:
            over.add(object_id)

    # --- a day ---------------------------------------------------------------

    def run(self) -> Figures:
        over = set()
        for day in range(self.days):
            self._churn(day)
            candidates = self.candidates(day)
            for _ in range(self.objects_per_day):
                object_id = self.rng.randbytes(32)
                chosen = self.place(object_id, N, candidates)
                if len(chosen) < N:
                    continue   # the backup would say so; nothing stored
                self.objects[object_id] = [None] * N
                self.figures.objects += 1
                for index, node_id in enumerate(chosen):
                    self._assign(object_id, index, node_id)
                self._note_sybil(object_id, over)
            self._lose_shares()
            self._check(day)
            self._repair(day, over)
        self.figures.sybil_over_limit = len(over)
        return self.figures

    def _churn(self, day: int) -> None:
        if day >= SYBIL_DAY and self.sybils_left:
            for _ in range(self.sybils_left):
                self._add("sybil", day)
            self.sybils_left = 0
        if day and self.rng.random() < NEW_NODES_A_DAY:
            self._add("honest", day)
        for node in self.nodes.values():
            down = {"flaky": FLAKY_DOWN, "honest": HONEST_DOWN, "sybil": 0.0}[node.kind]
            node.up = self.rng.random() >= down

    def _lose_shares(self) -> None:
        for node in self.nodes.values():
            if node.kind != "flaky" or not node.holds:
                continue
            lost = {held for held in sorted(node.holds) if self.rng.random() < FLAKY_LOSS}
            for object_id, index in lost:
                node.holds.discard((object_id, index))
                self.figures.flaky_bytes_lost += SHARE_BYTES

    def _check(self, day: int) -> None:
        """A seventh of every object's shares challenged; per node one event
        of each kind a day (times = how many)."""
        now = self.now(day)
        seen = {}
        self.found_lost = []
        for object_id, holders in self.objects.items():
            for index, node_id in enumerate(holders):
                if node_id is None or self.rng.random() >= CHECK_FRACTION:
                    continue
                node = self.nodes[node_id]
                tally = seen.setdefault(node_id, [0, 0, 0])
                if not node.up:
                    tally[2] = 1
                elif (object_id, index) in node.holds:
                    tally[0] += 1
                else:
                    tally[1] += 1
                    self.found_lost.append((object_id, index))
        for node_id, (ok, failed, down) in seen.items():
            standing = self.standings[node_id]
            if ok:
                standing = standing.record(VERIFY_OK, now, ok)
            if failed:
                standing = standing.record(VERIFY_FAILED, now, failed)
            standing = standing.record(DOWN if down and not (ok or failed) else UP, now)
            self.standings[node_id] = standing

    def _repair(self, day: int, over: set) -> None:
        now = self.now(day)
        candidates = [c for c in self.candidates(day) if c.score >= MIN_SCORE or not self.rules]
        todo = {}
        for object_id, index in self.found_lost:
            todo.setdefault(object_id, set()).add(index)
        if self.rules:   # reputation: move everything off nodes below the threshold
            for node in self.nodes.values():
                if node.node_id in self.retired:
                    continue
                if self.standings.get(node.node_id) and \
                        self.standings[node.node_id].score(now) < MIN_SCORE:
                    self.retired.add(node.node_id)
                    if node.kind == "flaky":
                        self.figures.flaky_retired_after.append(day - node.joined)
                    for object_id, index in node.holds:
                        todo.setdefault(object_id, set()).add(index)
                        self.figures.moved_off_distrusted += 1
        for object_id, indexes in todo.items():
            holders = self.objects[object_id]
            alive = [i for i, nid in enumerate(holders) if nid is not None and i not in indexes
                     and (object_id, i) in self.nodes[nid].holds]
            if len(alive) < K:
                self.figures.objects_lost += 1
                continue
            keep = {holders[i] for i in alive}
            groups = {diversity_group(self.nodes[nid].host) for nid in keep}
            chosen = self.place(object_id + bytes([day % 256]), len(indexes), candidates,
                                avoid_nodes=keep, avoid_groups=groups)
            for index, node_id in zip(sorted(indexes), chosen):
                old = holders[index]
                if old is not None:
                    self.nodes[old].holds.discard((object_id, index))
                self._assign(object_id, index, node_id)
                self.figures.repaired_shares += 1
            self._note_sybil(object_id, over)


def simulate(nodes: int = 1000, days: int = 365, seed: int = 1, rules: bool = True,
             objects_per_day: int = OBJECTS_PER_DAY, sybil_share: float = SYBIL_SHARE) -> dict:
    return TrustSim(nodes, days, seed, rules, objects_per_day, sybil_share).run().summary()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--objects-per-day", type=int, default=OBJECTS_PER_DAY)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = {"with_rules": simulate(args.nodes, args.days, args.seed, True, args.objects_per_day),
               "rules_off": simulate(args.nodes, args.days, args.seed, False,
                                     args.objects_per_day)}
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"{args.nodes} nodes ({SYBIL_SHARE:.0%} Sybil ids on one host from day {SYBIL_DAY}, "
          f"{FLAKY_SHARE:.0%} flaky), {args.days} days, {args.objects_per_day} objects a day, "
          f"{K}-of-{N}")
    for name, figures in results.items():
        print(f"\n{name}:")
        for key, value in figures.items():
            print(f"  {key:34} {value}")
    target = results["with_rules"]["objects_sybil_over_n_minus_k"]
    print(f"\nobjects where the Sybil operator held more than n-k shares: {target} (target 0)")
    return 0 if target == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
