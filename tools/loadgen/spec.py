"""What a run asks for: the op mix and the object-size distribution.

Pure parsing and drawing; no reactor, no sockets. Sizes use decimal units
(k = 1000, M = 10^6, G = 10^9); KiB/MiB/GiB (or Ki/Mi/Gi) are binary.
"""
import math

OPS = ("retrieve", "store", "verify", "delete")
OP_ALIASES = {"download": "retrieve", "read": "retrieve", "get": "retrieve",
              "upload": "store", "write": "store", "put": "store"}

# The home-directory mix of shared/tools/gen_mix.py: (low, high, files) per bucket,
# sizes log-uniform inside a bucket.
HOMEMIX_BUCKETS = ((1, 10, 1), (10, 100, 2), (100, 1000, 7), (1000, 10000, 26),
                   (10000, 100000, 12), (100000, 1000000, 2), (1000000, 10000000, 1))

MAX_OBJECT = 1 << 30          # the node's MAX_SHARE_SIZE
EXP_TAIL_FACTOR = 20          # an exponential draw is capped at 20 x its mean

_UNITS = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6,
          "g": 10 ** 9, "gb": 10 ** 9, "ki": 1 << 10, "kib": 1 << 10,
          "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30}


class SpecError(ValueError):
    """A command-line value that cannot be understood (a usage error)."""


def parse_size(text: str, limit: int = MAX_OBJECT) -> int:
    """'100', '100B', '10k', '1KB', '1.5M', '128MB', '4MiB' -> bytes."""
    raw = text.strip()
    i = len(raw)
    while i and not (raw[i - 1].isdigit() or raw[i - 1] == "."):
        i -= 1
    number, unit = raw[:i], raw[i:].strip().lower()
    if unit not in _UNITS or not number:
        raise SpecError(f"cannot read the size {text!r} (examples: 100, 10k, 1MB, 128MB, 4MiB)")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise SpecError(f"cannot read the size {text!r}") from None
    if value < 1 or value > limit:
        raise SpecError(f"size {text!r} is outside 1 B .. {format_size(limit)}")
    return int(value)


def format_size(n: float) -> str:
    """Bytes -> a short decimal label: 100B, 10KB, 1MB, 128MB."""
    for unit, factor in (("GB", 10 ** 9), ("MB", 10 ** 6), ("KB", 10 ** 3)):
        if n >= factor:
            value = n / factor
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{int(n)}B"


def parse_mix(text: str) -> dict:
    """'retrieve=80,store=20' -> {'retrieve': 0.8, 'store': 0.2} (weights normalised)."""
    weights = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = OP_ALIASES.get(name.strip().lower(), name.strip().lower())
        if not sep or name not in OPS:
            raise SpecError(f"cannot read {part!r} in --mix: use op=weight with op one of "
                            f"{', '.join(OPS)} (e.g. retrieve=80,store=20)")
        try:
            weight = float(value)
        except ValueError:
            raise SpecError(f"weight {value!r} of {name} in --mix is not a number") from None
        if weight < 0:
            raise SpecError(f"weight of {name} in --mix is negative")
        weights[name] = weights.get(name, 0.0) + weight
    total = sum(weights.values())
    if total <= 0:
        raise SpecError("--mix needs at least one op with a positive weight")
    return {op: w / total for op, w in weights.items() if w > 0}


def format_mix(mix: dict) -> str:
    return ",".join(f"{op}={mix[op] * 100:g}" for op in OPS if op in mix)


class SizeDist:
    """Draws object sizes: 'exp:MEAN', 'homemix', or a fixed size."""

    def __init__(self, kind: str, mean: float, max_size: int, text: str):
        self.kind = kind
        self.mean = mean
        self.max_size = max_size
        self.text = text
        self._cum = None
        if kind == "homemix":
            total = sum(n for _, _, n in HOMEMIX_BUCKETS)
            acc, cum = 0, []
            for lo, hi, n in HOMEMIX_BUCKETS:
                acc += n
                cum.append((acc / total, math.log(lo), math.log(hi), lo, hi))
            self._cum = cum

    def draw(self, rng) -> int:
        kind = self.kind
        if kind == "fixed":
            return self.max_size
        if kind == "exp":
            size = int(rng.expovariate(1.0 / self.mean)) + 1
            return size if size <= self.max_size else self.max_size
        u = rng.random()
        for edge, loglo, loghi, lo, hi in self._cum:
            if u <= edge:
                size = int(math.exp(rng.uniform(loglo, loghi)))
                return min(max(size, lo), hi - 1)
        return self._cum[-1][4] - 1

    def to_dict(self) -> dict:
        return {"spec": self.text, "kind": self.kind, "mean": self.mean, "max": self.max_size}


def homemix_mean() -> float:
    """Expected size of a log-uniform homemix draw."""
    total = sum(n for _, _, n in HOMEMIX_BUCKETS)
    mean = 0.0
    for lo, hi, n in HOMEMIX_BUCKETS:
        mean += n / total * (hi - lo) / math.log(hi / lo)
    return mean


def parse_size_dist(text: str, max_size: int = None) -> SizeDist:
    raw = text.strip()
    low = raw.lower()
    if low == "homemix":
        return SizeDist("homemix", homemix_mean(), 10 ** 7 - 1, raw)
    if low.startswith("exp:"):
        mean = parse_size(raw[4:])
        cap = max_size or min(MAX_OBJECT, max(EXP_TAIL_FACTOR * mean, 1 << 20))
        return SizeDist("exp", float(mean), int(cap), raw)
    if low.startswith("fixed:"):
        raw = raw[6:]
    try:
        size = parse_size(raw)
    except SpecError:
        raise SpecError(f"cannot read --size {text!r}: use exp:MEAN (e.g. exp:10k), "
                        f"homemix, or a fixed size (e.g. 100KB)") from None
    return SizeDist("fixed", float(size), size, text.strip())
