"""Which shares a check run challenges, and which objects it downloads (pure).

Rotation: every share has a slot in [0, 1), a hash of its key (stable:
a repaired share keeps its key, so it keeps its slot). A cycle (a week by
default) sweeps the slots once. Each run covers the slots from where the
last run stopped up to where the clock says the cycle should be, so with
daily runs each takes about a seventh of the shares, and a run after missed
ones takes their parts too. The position reached is kept in the state (a
pure record the caller persists), not recomputed from wall time alone, so
nothing is skipped when runs are late, early or missed; after an absence of
more than a cycle one run covers every share once and the sweep carries on
from the clock.

Data subset (`--read-data-subset`, restic's meaning): `n/N` takes the n-th
of N parts of the objects by a stable hash of their ids, so N runs with
1/N .. N/N download every object once; a fraction (`0.1` or `10%`) takes
that share of the objects at random.
"""
import math
import random
from typing import NamedTuple, Optional, Tuple

import blake3

from flud.errors import FludError

DAY = 86400.0
WEEK = 7 * DAY
_SLOT_SCALE = float(1 << 64)


def slot(key_hex: str) -> float:
    """A share's place in the cycle, in [0, 1), from its key."""
    digest = blake3.blake3(b"flud-check-rotation" + bytes.fromhex(key_hex)).digest(8)
    return int.from_bytes(digest, "big") / _SLOT_SCALE


class RotationState(NamedTuple):
    """epoch: when the first cycle began (None: no run yet). position: the
    cycles swept since then (1.5: one whole cycle and half the next)."""
    epoch: Optional[float] = None
    position: float = 0.0

    def to_wire(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    @classmethod
    def from_wire(cls, value: dict) -> "RotationState":
        return cls(value["epoch"], value["position"])


class Window(NamedTuple):
    """The slots a run covers: half-open ranges [lo, hi) within [0, 1)."""
    ranges: Tuple[Tuple[float, float], ...]

    def contains(self, share_slot: float) -> bool:
        return any(lo <= share_slot < hi for lo, hi in self.ranges)

    @property
    def fraction(self) -> float:
        return sum(hi - lo for lo, hi in self.ranges)


EVERYTHING = Window(((0.0, 1.0),))


def plan_run(state: RotationState, now: float, cycle: float = WEEK,
             interval: Optional[float] = None) -> tuple:
    """(Window, the state after this run) for a run at `now`. The first run
    starts the cycle as if it had begun `interval` ago (the runs' planned
    spacing, a day for the agent's daily checks): it takes its part, and
    without an interval (a check run by hand) the whole cycle."""
    if cycle <= 0:
        raise ValueError(f"a check cycle must be longer than 0 s, got {cycle}")
    if state.epoch is None:
        state = RotationState(now - min(cycle, interval or cycle), 0.0)
    due = max(0.0, (now - state.epoch) / cycle)
    start = state.position
    if due - start >= 1.0:
        # More than a whole cycle behind: one run covers everything once.
        return EVERYTHING, RotationState(state.epoch, due)
    if due <= start:
        return Window(()), state
    lo = start - math.floor(start)
    hi = lo + (due - start)
    ranges = ((lo, hi),) if hi <= 1.0 else ((lo, 1.0), (0.0, hi - 1.0))
    return Window(ranges), RotationState(state.epoch, due)


class BadDataSubset(FludError):
    code = "BAD_DATA_SUBSET"


class DataSubset(NamedTuple):
    """part of parts (1-based), or a fraction."""
    part: int = 0
    parts: int = 0
    fraction: float = 0.0

    def picks(self, object_id: str, rng: random.Random) -> bool:
        if self.parts:
            digest = blake3.blake3(b"flud-data-subset" + object_id.encode()).digest(8)
            return int.from_bytes(digest, "big") % self.parts == self.part - 1
        return rng.random() < self.fraction


def parse_subset(text: str) -> DataSubset:
    """"n/N", "F" (0 < F <= 1) or "P%" (0 < P <= 100)."""
    raw = text.strip()
    try:
        if "/" in raw:
            n_text, _, parts_text = raw.partition("/")
            part, parts = int(n_text), int(parts_text)
            if not 1 <= part <= parts:
                raise BadDataSubset(f"--read-data-subset {text!r}: n/N needs 1 <= n <= N")
            return DataSubset(part, parts)
        fraction = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadDataSubset(f"--read-data-subset {text!r}: give n/N (2/7), a fraction "
                            f"(0.1) or a percentage (10%)") from None
    if not 0.0 < fraction <= 1.0:
        raise BadDataSubset(f"--read-data-subset {text!r}: the share must be above 0 "
                            f"and at most all of the data")
    return DataSubset(fraction=fraction)


def select_objects(object_ids, subset: Optional[DataSubset], rng: random.Random) -> set:
    """The ids a run downloads and hash-checks (none without a subset)."""
    if subset is None:
        return set()
    return {oid for oid in object_ids if subset.picks(oid, rng)}
