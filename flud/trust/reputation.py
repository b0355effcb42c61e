"""A node's reputation as one client saw it (pure; the clock is passed in).

Only what this client observed itself counts: whether the node answered
when this client needed it (uptime, from checks and jobs), what its VERIFY
answers proved (a share kept, or lost or corrupt), how its requests ended,
and how long this client has known it. Nothing a peer says about another
is ever taken. In the spirit of Sia's host scoring, the score is a product
of factors in [0, 1], each a ratio of decayed counts with a prior:

    uptime    (up + 3)       / (up + down + 3)          half-life 14 days
    verify    ((passed + 1)  / (passed + 1 + failed))^20  half-life 90 days
    requests  (ok + 3)       / (ok + failed + 3)        half-life 14 days

Decay is what forgives: an outage or a burst of failed requests weighs less
every day and is gone from the score in a few weeks, so a home machine that
was off for a weekend comes back to full standing. Losing data is what a
storage node must not do, so the verify ratio is raised to the 20th power
and fades slowly (90 days): a node that lost one share of those it was
asked for (one of nine) scores 0.12, below MIN_SCORE (0.3), and its data
is moved; one that lost one in forty keeps 0.61; a node that fails 7% of
its challenges (the simulation's flaky nodes) falls to 0.26 whatever else
it does. Why 20: tools/trust_sim.py with 12 let flaky nodes lose 756 MiB
over a year, retired a median 98 days after joining. The uptime and
request priors keep a few bad runs from condemning a node nobody has seen
much of: three outages in a row with nothing else known give 0.5.

Vetting: a node is vetted once it passed VETTED_VERIFIES verifies of this
client and this client first saw it VETTED_DAYS ago or more. Why 10 over 7
days: a week spans a weekday/weekend cycle of home machines, so a node
that only runs while its owner is at the desk shows it; ten passes are
about two weeks of daily checks of one share or one check of ten, enough
that a node which keeps nothing (answers from nowhere) is caught: each
VERIFY asks a fresh nonce over a range only the holder of the bytes can
hash. Storj asks 100 audits across the whole network; a single client
sees far fewer, so its bar is lower but its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

DAY = 86400.0
UPTIME_HALF_LIFE = 14 * DAY
VERIFY_HALF_LIFE = 90 * DAY
REQUEST_HALF_LIFE = 14 * DAY
VERIFY_POWER = 20
UPTIME_PRIOR = 3.0
REQUEST_PRIOR = 3.0
VETTED_VERIFIES = 10
VETTED_DAYS = 7

# Event kinds (the store keeps them by these names).
UP, DOWN = "up", "down"
VERIFY_OK, VERIFY_FAILED = "verify_ok", "verify_failed"
REQUEST_OK, REQUEST_FAILED = "request_ok", "request_failed"
KINDS = (UP, DOWN, VERIFY_OK, VERIFY_FAILED, REQUEST_OK, REQUEST_FAILED)
HALF_LIFE = {UP: UPTIME_HALF_LIFE, DOWN: UPTIME_HALF_LIFE,
             VERIFY_OK: VERIFY_HALF_LIFE, VERIFY_FAILED: VERIFY_HALF_LIFE,
             REQUEST_OK: REQUEST_HALF_LIFE, REQUEST_FAILED: REQUEST_HALF_LIFE}


def decayed(value: float, since: float, now: float, half_life: float) -> float:
    return value * math.pow(0.5, max(0.0, now - since) / half_life)


@dataclass
class NodeStanding:
    """What one client knows of one node: decayed counts per event kind,
    all as of `updated`, and the plain count of verifies ever passed (for
    vetting: passes do not expire)."""
    first_seen: float
    updated: float
    counts: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    verifies_passed: int = 0

    def at(self, now: float) -> "NodeStanding":
        """The counts decayed to `now`."""
        counts = {kind: decayed(v, self.updated, now, HALF_LIFE[kind])
                  for kind, v in self.counts.items()}
        return replace(self, updated=max(now, self.updated), counts=counts)

    def record(self, kind: str, now: float, times: float = 1.0) -> "NodeStanding":
        if kind not in HALF_LIFE:
            raise ValueError(f"unknown reputation event {kind!r}")
        standing = self.at(now)
        standing.counts[kind] += times
        if kind == VERIFY_OK:
            standing.verifies_passed += int(times)
        return standing

    def factors(self, now: float) -> dict:
        c = self.at(now).counts
        return {
            "uptime": (c[UP] + UPTIME_PRIOR) / (c[UP] + c[DOWN] + UPTIME_PRIOR),
            "verify": ((c[VERIFY_OK] + 1)
                       / (c[VERIFY_OK] + 1 + c[VERIFY_FAILED])) ** VERIFY_POWER,
            "requests": ((c[REQUEST_OK] + REQUEST_PRIOR)
                         / (c[REQUEST_OK] + c[REQUEST_FAILED] + REQUEST_PRIOR)),
        }

    def score(self, now: float) -> float:
        result = 1.0
        for value in self.factors(now).values():
            result *= value
        return result

    def vetted(self, now: float) -> bool:
        return (self.verifies_passed >= VETTED_VERIFIES
                and now - self.first_seen >= VETTED_DAYS * DAY)


def new_standing(now: float) -> NodeStanding:
    return NodeStanding(first_seen=now, updated=now)
