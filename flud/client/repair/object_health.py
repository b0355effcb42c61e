"""How healthy each stored object is, from what checks saw (pure).

An object is k-of-n shares (a bundle, or one extent's share streams), each a
ShareHolder (index, share key, node id) as the holder map names it. Checks
challenge a rotating part of the shares (rotation.py), so what is known of
a share is the last thing seen of it, kept in a HealthBook that the caller
persists between runs; `now` is always given, never read.

A share is
- healthy (confirmed): its node answered this run, and the share answered
  its last challenge correctly or nothing bad is known of it (a share not
  challenged yet this cycle; every run asks every holder node something);
- unreachable: its node did not answer (refused, hung up, stalled) since T,
  and less than `grace` ago: presumed alive, it may come back;
- lost: corrupt (a wrong digest: counted at once, never healthy), missing
  (the node answered NotFound), or its node unreachable for `grace` or more.

An object's class says what a restore could do now, from the confirmed
shares alone (an unreachable share cannot be fetched, whatever the grace):
- healthy: all n confirmed;
- degraded: more than k + 1 confirmed, fewer than n;
- at risk: k or k + 1 confirmed (one or two more losses and it is unreadable);
- unavailable: fewer than k confirmed, but with the unreachable ones that
  may return it would have k (a restore fails now);
- lost: fewer than k left even counting those.

Repair (needs_repair, to_recreate):
- at once, whatever the grace, when the confirmed shares are down to the
  safety margin (k + margin, SAFETY_MARGIN = 2 by default): every share not
  confirmed is re-created, the unreachable ones too;
- otherwise, when fewer than m shares are confirmed or unreachable within
  grace: the lost ones are. The grace only postpones the repair of objects
  that are still comfortably redundant.
Repair needs k confirmed shares to fetch; an unavailable object waits.

The holder map names one holder per index (the newest wins). After a repair
the share's old holder is recorded as superseded: if that node comes back it
holds a surplus copy, reported per node so prune can delete it, and never
counted as a second share of the object.
"""
from typing import NamedTuple, Optional, Tuple

from flud.client.records import ShareHolder

OK, CORRUPT, MISSING, UNREACHABLE = "ok", "corrupt", "missing", "unreachable"
OUTCOMES = (OK, CORRUPT, MISSING, UNREACHABLE)
HEALTHY, DEGRADED, AT_RISK = "healthy", "degraded", "at_risk"
UNAVAILABLE, LOST = "unavailable", "lost"
CLASSES = (HEALTHY, DEGRADED, AT_RISK, UNAVAILABLE, LOST)   # best first
GONE = "gone"   # a share's state: its node unreachable for grace or more

DAY = 86400.0
# A node unreachable this long counts as gone and its shares are re-created.
# Three days: a home machine off over a long weekend (Friday evening to
# Monday morning, ~2.5 days) is not repaired for, while with daily checks a
# node that left for good is repaired within ~4 days, and with weekly ones
# within two checks (the churn simulation's case; see DESIGN.md).
DEFAULT_GRACE = 3 * DAY

# Repair at once, whatever the grace, when an object's confirmed shares are
# down to k + SAFETY_MARGIN (6 for 4-of-8). Why 2: between two checks a
# house can lose several nodes at once (a power cut, a router, a move), and
# a check only finds an object after such a burst; with 2 shares above k it
# survives one more burst of two of its holders before it is found and
# repaired, and one of 1 would leave no room for a single node going down
# while the repair runs. 3 would repair (k fetches each) at every object
# with three shares away, so a weekend of a busy node's owner would cost a
# repair of most objects. Measured with the churn simulation under bursts
# (churn.py, DESIGN.md "Churn simulation"). Never above n - 1: with all n
# confirmed nothing is to be made.
SAFETY_MARGIN = 2


class RepairPolicy(NamedTuple):
    """m: repair when fewer than m shares are healthy (unreachable ones
    within `grace` count). None: the default for the object's k and n.
    margin: repair at once, whatever the grace, at k + margin confirmed
    shares or fewer (SAFETY_MARGIN by default)."""
    m: Optional[int] = None
    grace: float = DEFAULT_GRACE
    margin: int = SAFETY_MARGIN

    def threshold(self, k: int, n: int) -> int:
        return self.m if self.m is not None else default_m(k, n)

    def urgent_at(self, k: int, n: int) -> int:
        """The most confirmed shares at which repair no longer waits."""
        return min(k + self.margin, n - 1)


def default_m(k: int, n: int) -> int:
    """Repair below m = n - 1 (7 for 4-of-8): an object is repaired at its
    second lost share. Measured by the churn simulation (churn.py,
    tools/bench/bench_churn.py; 2,000 objects on 50 nodes, a year, weekly
    checks, DESIGN.md "Check and repair"): at 2% of nodes leaving a week no
    m from 6 to 8 loses an object, but the worst object kept only k shares
    with m = 6 (no margin left), 5 with m = 7 and 6 with m = 8; at 5% m = 6
    lost 133 objects, m = 7 23 and m = 8 1. m = 8 repairs at every lost
    share, so it fetches k shares for each: 2.3x the repair traffic of m = 7
    (163 against 71 MiB fetched a week per GiB at 2%). m = 7 keeps one share
    of margin at the issue's 2% for half the traffic of m = 8."""
    return max(k + 1, n - 1) if n > k else n


class StoredObject(NamedTuple):
    """One k-of-n object: its id (bundle id or extent id, hex), "bundle" or
    "extent", its code, its shares' holders (one per index, as the holder
    map has them) and its share length if known (a bundle's block length)."""
    object_id: str
    kind: str
    k: int
    n: int
    shares: Tuple[ShareHolder, ...]
    share_length: Optional[int] = None

    def holder_nodes(self) -> set:
        return {share.node for share in self.shares}


class Observation(NamedTuple):
    """What one challenge (or download) of a share on a node found, at `at`."""
    key: str
    node: str
    outcome: str
    at: float


class ObjectHealth(NamedTuple):
    object_id: str
    k: int
    state: str                 # one of CLASSES
    healthy: int               # confirmed: node answering, nothing bad known
    unreachable: int           # node away for less than grace: may come back
    lost: Tuple[int, ...]      # indexes lost (and any the map does not name)
    at_risk: Tuple[int, ...]   # indexes whose node is away, within grace
    needs_repair: bool
    urgent: bool               # down to the safety margin: the away ones are re-created too

    def to_recreate(self) -> Tuple[int, ...]:
        """The indexes a repair makes."""
        if not self.needs_repair:
            return ()
        return tuple(sorted(self.lost + self.at_risk)) if self.urgent else self.lost


def object_class(k: int, n: int, confirmed: int, left: int) -> str:
    """What a restore could do now: confirmed shares can be fetched; `left`
    counts the unreachable ones within grace too (they may come back).
    An object with k + 1 shares or fewer is at risk even with all of them
    confirmed (stored at reduced redundancy: n is what it was coded to)."""
    if confirmed >= n and confirmed > k + 1:
        return HEALTHY
    if confirmed > k + 1:
        return DEGRADED
    if confirmed >= k:
        return AT_RISK
    return UNAVAILABLE if left >= k else LOST


class NodeReport(NamedTuple):
    node: str
    reachable: bool
    unreachable_since: Optional[float]
    shares: int                # shares the holder map names on it
    ok: int                    # not known corrupt or missing
    corrupt: int
    missing: int
    surplus: int               # superseded copies it still holds (prune deletes)


class HealthBook:
    """What checks have seen, kept between runs (to_wire/from_wire)."""

    def __init__(self):
        self.unreachable_since = {}   # node -> first unanswered challenge time
        self.last_answer = {}         # node -> last time it answered anything
        self.bad = {}                 # (key, node) -> CORRUPT or MISSING
        self.superseded = {}          # (key, old node) -> object id

    # --- what checks saw ------------------------------------------------------

    def observe(self, obs: Observation) -> None:
        if obs.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {obs.outcome!r}")
        place = (obs.key, obs.node)
        if obs.outcome == UNREACHABLE:
            self.unreachable_since.setdefault(obs.node, obs.at)
            return
        self.unreachable_since.pop(obs.node, None)
        self.last_answer[obs.node] = max(obs.at, self.last_answer.get(obs.node, obs.at))
        if place in self.superseded:
            # A surplus copy: only whether it is still there matters (prune).
            if obs.outcome == MISSING:
                del self.superseded[place]
            return
        if obs.outcome == OK:
            self.bad.pop(place, None)
        else:
            self.bad[place] = obs.outcome

    def moved(self, object_id: str, share: ShareHolder, new_node: str) -> None:
        """A repair stored share `share` again on new_node: the old copy is
        surplus from now on, whatever its node does later."""
        if share.node == new_node:
            return
        old = (share.key, share.node)
        self.superseded[old] = object_id
        self.bad.pop(old, None)
        # The new holder may be a node that kept a surplus copy of it.
        self.superseded.pop((share.key, new_node), None)
        self.bad.pop((share.key, new_node), None)

    # --- classification ------------------------------------------------------

    def share_state(self, share: ShareHolder, now: float, grace: float) -> str:
        """OK (healthy), UNREACHABLE (within grace), or CORRUPT, MISSING, GONE."""
        bad = self.bad.get((share.key, share.node))
        if bad is not None:
            return bad
        since = self.unreachable_since.get(share.node)
        if since is None:
            return OK
        return GONE if now - since >= grace else UNREACHABLE

    def classify(self, obj: StoredObject, now: float, policy: RepairPolicy) -> ObjectHealth:
        newest = {}
        for share in obj.shares:   # one holder per index: the last row wins
            newest[share.index] = share
        healthy, lost, at_risk = 0, [], []
        for index in range(obj.n):
            share = newest.get(index)
            state = GONE if share is None else self.share_state(share, now, policy.grace)
            if state == OK:
                healthy += 1
            elif state == UNREACHABLE:
                at_risk.append(index)
            else:
                lost.append(index)
        left = healthy + len(at_risk)
        m = policy.threshold(obj.k, obj.n)
        state = object_class(obj.k, obj.n, healthy, left)
        # Repair needs k shares to fetch; with fewer it waits for nodes to return.
        urgent = healthy <= policy.urgent_at(obj.k, obj.n) and healthy < obj.n
        needs = healthy >= obj.k and (left < m or urgent)
        return ObjectHealth(obj.object_id, obj.k, state, healthy, len(at_risk), tuple(lost),
                            tuple(at_risk), needs, needs and urgent)

    def node_reports(self, objects, now: float, grace: float) -> list:
        """Per node: reachability, the shares the map names on it and what
        was last seen of them, and the surplus copies it still holds."""
        rows = {}

        def row(node):
            if node not in rows:
                rows[node] = {"shares": 0, OK: 0, CORRUPT: 0, MISSING: 0, "surplus": 0}
            return rows[node]

        for obj in objects:
            for share in obj.shares:
                r = row(share.node)
                r["shares"] += 1
                bad = self.bad.get((share.key, share.node))
                r[bad or OK] += 1
        for _, node in self.superseded:
            row(node)["surplus"] += 1
        return [NodeReport(node, node not in self.unreachable_since,
                           self.unreachable_since.get(node), r["shares"], r[OK], r[CORRUPT],
                           r[MISSING], r["surplus"])
                for node, r in sorted(rows.items())]

    def pruned(self, key: str, node: str) -> None:
        """Prune deleted the surplus copy of `key` on `node`."""
        self.superseded.pop((key, node), None)

    def surplus(self) -> list:
        """[(object id, share key, node)] of superseded copies (for prune)."""
        return sorted((obj, key, node) for (key, node), obj in self.superseded.items())

    # --- persistence ---------------------------------------------------------

    def to_wire(self) -> dict:
        return {"v": 1,
                "away": sorted([n, t] for n, t in self.unreachable_since.items()),
                "answered": sorted([n, t] for n, t in self.last_answer.items()),
                "bad": sorted([k, n, what] for (k, n), what in self.bad.items()),
                "superseded": sorted([k, n, o] for (k, n), o in self.superseded.items())}

    @classmethod
    def from_wire(cls, value: dict) -> "HealthBook":
        if value.get("v") != 1:
            raise ValueError(f"a health book of version {value.get('v')!r}; this flud reads 1")
        book = cls()
        book.unreachable_since = {n: t for n, t in value["away"]}
        book.last_answer = {n: t for n, t in value["answered"]}
        book.bad = {(k, n): what for k, n, what in value["bad"]}
        book.superseded = {(k, n): o for k, n, o in value["superseded"]}
        return book
