"""What counts as a small file, and when bundles and tars are sealed.

Pure arithmetic over sizes and times: the aggregator asks, this answers.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024

# Files strictly smaller than this are aggregated. At 1 MiB a file is already
# one whole segment (the large-file unit), so aggregating it saves nothing;
# below it the fixed per-STORE cost (round trip, handshake, index write on n
# nodes) dominates the transfer: the 2006 measurements showed a flat ~7 s per
# file up to ~1 MiB, and only above that did throughput approach the link's.
DEFAULT_SMALL_FILE_LIMIT = 1 * MIB
# A bundle is the coding unit of small files: same size as a large-file
# segment, so shares of both kinds have the same size and cost.
DEFAULT_BUNDLE_TARGET = 1 * MIB
# Big enough to amortise one STORE over many members, small enough that a
# failed STORE is cheap to redo on a spare.
DEFAULT_TAR_TARGET = 4 * MIB
# A member never waits longer than this for its tar to fill.
DEFAULT_MAX_AGE = 2.0
# Bytes the aggregator may hold: open bundle + open tars + sealed tars not yet
# confirmed stored.
DEFAULT_MAX_PENDING_BYTES = 32 * MIB

# Sealed-but-unconfirmed tars can be drained to zero, but the open bundle
# cannot: the bound must leave room for it twice over (see Aggregator, which
# seals open tars down to half the bound under pressure) or no progress is
# possible.
PENDING_TO_BUNDLE_MIN_RATIO = 2


@dataclass(frozen=True)
class FlushPolicy:
    small_file_limit: int = DEFAULT_SMALL_FILE_LIMIT
    bundle_target: int = DEFAULT_BUNDLE_TARGET
    tar_target: int = DEFAULT_TAR_TARGET
    max_age: float = DEFAULT_MAX_AGE
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES

    def __post_init__(self) -> None:
        for name in ("small_file_limit", "bundle_target", "tar_target",
                     "max_pending_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"FlushPolicy.{name} must be an int number "
                                 f"of bytes, got {value!r}")
            if value <= 0:
                raise ValueError(f"FlushPolicy.{name} must be > 0, "
                                 f"got {value}")
        if (isinstance(self.max_age, bool)
                or not isinstance(self.max_age, (int, float))
                or not self.max_age > 0):
            raise ValueError(f"FlushPolicy.max_age must be a number of "
                             f"seconds > 0, got {self.max_age!r}")
        if self.max_pending_bytes <= PENDING_TO_BUNDLE_MIN_RATIO * self.bundle_target:
            raise ValueError(
                f"FlushPolicy.max_pending_bytes ({self.max_pending_bytes}) "
                f"must exceed {PENDING_TO_BUNDLE_MIN_RATIO} x bundle_target "
                f"({self.bundle_target}), or the open bundle alone could "
                f"keep the aggregator over its bound")
        if self.tar_target > self.max_pending_bytes:
            raise ValueError(
                f"FlushPolicy.tar_target ({self.tar_target}) must not exceed "
                f"max_pending_bytes ({self.max_pending_bytes}): such a tar "
                f"could never fill")

    def bundle_full(self, size: int) -> bool:
        """True if an open bundle of `size` bytes must be sealed now."""
        _check_size(size)
        return size >= self.bundle_target

    def tar_full(self, size: int) -> bool:
        """True if an open tar of `size` bytes must be sealed now."""
        _check_size(size)
        return size >= self.tar_target

    def tar_expired(self, opened_at: float, now: float) -> bool:
        """True once a tar opened at `opened_at` has waited max_age or more."""
        return now - opened_at >= self.max_age

    def over_pending(self, pending_bytes: int) -> bool:
        """True if the caller must drain before adding more."""
        return pending_bytes >= self.max_pending_bytes


def _check_size(size: int) -> None:
    if size < 0:
        raise ValueError(f"a size cannot be negative, got {size}")
