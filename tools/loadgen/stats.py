"""Per-op figures: counters, bounded latency samples, merging, percentiles.

A client process keeps, per op type, plain counters and a reservoir (Vitter's
algorithm R) of at most RESERVOIR (latency, TTFB) pairs, plus a smaller one
per reporting interval. Merging reservoirs from several processes weights each
sample by seen/kept, so a process that did more ops counts for more.
"""
import heapq
from array import array

RESERVOIR = 100_000
INTERVAL_RESERVOIR = 2_000


class Reservoir:
    """A uniform sample of at most `size` (latency, ttfb) pairs, in seconds."""

    __slots__ = ("size", "seen", "lat", "ttfb", "_random")

    def __init__(self, size: int, rng):
        self.size = size
        self.seen = 0
        self.lat = array("d")
        self.ttfb = array("d")
        self._random = rng.random

    def add(self, lat: float, ttfb: float) -> None:
        self.seen += 1
        if len(self.lat) < self.size:
            self.lat.append(lat)
            self.ttfb.append(ttfb)
            return
        j = int(self._random() * self.seen)
        if j < self.size:
            self.lat[j] = lat
            self.ttfb[j] = ttfb

    def clear(self) -> None:
        self.seen = 0
        del self.lat[:]
        del self.ttfb[:]


class Counters:
    """What one op type did, in one process, over some stretch of time."""

    __slots__ = ("ops", "bytes_up", "bytes_down", "lat_sum", "ttfb_sum", "errors", "samples")

    def __init__(self, reservoir_size: int, rng):
        self.ops = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.lat_sum = 0.0
        self.ttfb_sum = 0.0
        self.errors = {}
        self.samples = Reservoir(reservoir_size, rng)

    def reset(self) -> None:
        self.ops = self.bytes_up = self.bytes_down = 0
        self.lat_sum = self.ttfb_sum = 0.0
        self.errors = {}
        self.samples.clear()

    def to_dict(self, with_samples: bool = True) -> dict:
        d = {"ops": self.ops, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
             "lat_sum": self.lat_sum, "ttfb_sum": self.ttfb_sum, "errors": dict(self.errors),
             "seen": self.samples.seen}
        if with_samples:
            # microseconds as integers: compact JSON, ample resolution
            d["lat_us"] = [int(x * 1e6) for x in self.samples.lat]
            d["ttfb_us"] = [int(x * 1e6) for x in self.samples.ttfb]
        return d


class OpRecorder:
    """Counters per op type for the whole run and for the current interval."""

    def __init__(self, ops, rng, reservoir: int = RESERVOIR,
                 interval_reservoir: int = INTERVAL_RESERVOIR):
        self.total = {op: Counters(reservoir, rng) for op in ops}
        self.interval = {op: Counters(interval_reservoir, rng) for op in ops}

    def ok(self, op: str, lat: float, ttfb: float, up: int, down: int) -> None:
        for c in (self.total[op], self.interval[op]):
            c.ops += 1
            c.bytes_up += up
            c.bytes_down += down
            c.lat_sum += lat
            c.ttfb_sum += ttfb
            c.samples.add(lat, ttfb)

    def error(self, op: str, kind: str) -> None:
        for c in (self.total[op], self.interval[op]):
            c.errors[kind] = c.errors.get(kind, 0) + 1

    def take_interval(self) -> dict:
        out = {op: c.to_dict() for op, c in self.interval.items()
               if c.ops or c.errors}
        for c in self.interval.values():
            c.reset()
        return out

    def totals(self, with_samples: bool = False) -> dict:
        return {op: c.to_dict(with_samples) for op, c in self.total.items()}

    def total_samples(self):
        """op -> (seen, lat array, ttfb array), for the binary samples file."""
        return {op: (c.samples.seen, c.samples.lat, c.samples.ttfb)
                for op, c in self.total.items()}


# ---- the parent's side: merging and summarising ---------------------------------


class Merged:
    """One op type merged over processes: counters plus weighted sample groups.

    Samples stay grouped by where they came from, each group with one weight
    (seen / kept), so merging 100k samples from each process costs one sorted
    list of floats per group rather than a tuple per sample.
    """

    def __init__(self):
        self.ops = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.lat_sum = 0.0
        self.ttfb_sum = 0.0
        self.errors = {}
        self.lat = []    # [(values in seconds, weight)]
        self.ttfb = []

    def add_counts(self, d: dict) -> None:
        self.ops += d["ops"]
        self.bytes_up += d["bytes_up"]
        self.bytes_down += d["bytes_down"]
        self.lat_sum += d["lat_sum"]
        self.ttfb_sum += d["ttfb_sum"]
        for kind, n in d["errors"].items():
            self.errors[kind] = self.errors.get(kind, 0) + n

    def add_samples(self, seen: int, lat, ttfb) -> None:
        """lat/ttfb in seconds; each kept sample stands for seen/len ops."""
        if not len(lat):
            return
        weight = seen / len(lat)
        self.lat.append((lat, weight))
        self.ttfb.append((ttfb, weight))

    def add_interval(self, d: dict) -> None:
        self.add_counts(d)
        self.add_samples(d["seen"], [x / 1e6 for x in d.get("lat_us", ())],
                         [x / 1e6 for x in d.get("ttfb_us", ())])

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def summary(self, elapsed: float) -> dict:
        ops = self.ops

        def per_s(x):
            return x / elapsed if elapsed and elapsed > 0 else None
        return {
            "ops": ops,
            "errors": self.error_count,
            "errors_by_kind": dict(sorted(self.errors.items())),
            "ops_per_s": per_s(ops),
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_up_per_s": per_s(self.bytes_up),
            "bytes_down_per_s": per_s(self.bytes_down),
            "latency_s": _dist(self.lat_sum, ops, self.lat),
            "ttfb_s": _dist(self.ttfb_sum, ops, self.ttfb),
        }


def _dist(total: float, n: int, groups: list) -> dict:
    if not n:
        return {"avg": None, "p50": None, "p99": None, "max": None}
    p50, p99 = weighted_percentiles(groups, (0.50, 0.99))
    top = [max(values) for values, _ in groups if len(values)]
    return {"avg": total / n, "p50": p50, "p99": p99, "max": max(top) if top else None}


def weighted_percentiles(groups: list, quantiles) -> list:
    """Nearest-rank percentiles over groups of (values, weight per value)."""
    groups = [(sorted(values), w) for values, w in groups if len(values)]
    if not groups:
        return [None for _ in quantiles]
    total = sum(len(values) * w for values, w in groups)
    targets = sorted((q * total - 1e-9, i) for i, q in enumerate(quantiles))
    out = [groups[0][0][-1]] * len(quantiles)
    merged = heapq.merge(*[_weighted(values, w) for values, w in groups])
    acc = 0.0
    t = 0
    for x, w in merged:
        acc += w
        while t < len(targets) and acc >= targets[t][0]:
            out[targets[t][1]] = x
            t += 1
        if t == len(targets):
            break
    return out


def _weighted(values, weight):
    for x in values:
        yield x, weight


# ---- the final samples travel through a file, not the pipe ------------------------


def write_samples(path: str, samples: dict) -> None:
    """samples: op -> (seen, lat array('d'), ttfb array('d'))."""
    import json
    header = {op: [seen, len(lat)] for op, (seen, lat, _) in samples.items()}
    with open(path + ".tmp", "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        for op, (_, lat, ttfb) in samples.items():
            lat.tofile(f)
            ttfb.tofile(f)
    import os
    os.replace(path + ".tmp", path)


def read_samples(path: str) -> dict:
    """-> op -> (seen, lat array, ttfb array); {} if the file is missing or bad."""
    import json
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
            out = {}
            for op, (seen, n) in header.items():
                lat, ttfb = array("d"), array("d")
                lat.fromfile(f, n)
                ttfb.fromfile(f, n)
                out[op] = (seen, lat, ttfb)
            return out
    except (OSError, ValueError, EOFError):
        return {}
