"""Give to get: what an owner may store on a node, from what it gives
(docs/quotas.md). Pure arithmetic; the node keeps the numbers
(flud/node/ledger_store.py) and calls these at each STORE.

For an owner O, a node keeps:
  held(O)   bytes it holds for O (its own store's index: a fact)
  given(O)  bytes O's linked nodes hold for *this node*, counted only as
            this node's own spot checks proved them (claims, flud/trust/
            claims.py): never what O or its nodes say.

O may store while  held(O) + size <= credit(O) = grant + ratio x given(O).
An explicit per-owner quota (a friend) replaces the formula for that
owner. A grant of None means no quota at all (a testnet's default: the
node then neither refuses nor asks for claims).
"""
import math
from dataclasses import dataclass, field

from flud.units import format_size

DEFAULT_RATIO = 1.0
# How far ahead of what an owner holds its claims run: claims are placed so
# that credit stays about one grant above held (with a floor, so a tiny grant
# does not mean a claim per share).
MIN_HEADROOM = 1024 * 1024
# Claims go out in pieces between these sizes: each is one STORE (held in
# memory while it is sent) and one row in the ledger.
MIN_CLAIM = 64 * 1024
MAX_CLAIM = 16 * 1024 * 1024


@dataclass(frozen=True)
class QuotaTerms:
    grant: int | None                 # bytes every owner gets for nothing; None: no quota
    ratio: float = DEFAULT_RATIO      # bytes of credit per verified byte given
    owner_quotas: dict = field(default_factory=dict)   # owner id (bytes) -> bytes, overrides
    claim_allowance: int | None = None  # bytes of claims a node identity may keep here

    @property
    def unlimited(self) -> bool:
        return self.grant is None

    def explicit(self, owner: bytes) -> int | None:
        return self.owner_quotas.get(owner)


@dataclass(frozen=True)
class QuotaRefusal:
    """Why a STORE was refused, with every number the message names."""
    owner: bytes
    held: int
    size: int
    credit: int
    grant: int
    given: int
    ratio: float
    explicit: bool = False

    def message(self) -> str:
        if self.explicit:
            return (f"this node holds {self.held} bytes for you ({format_size(self.held)}); "
                    f"this store of {self.size} would pass the quota its operator set for you, "
                    f"{self.credit} bytes ({format_size(self.credit)})")
        return (f"this node holds {self.held} bytes for you ({format_size(self.held)}); "
                f"this store of {self.size} would pass your credit of {self.credit} bytes = "
                f"grant {self.grant} + ratio {self.ratio:g} x given {self.given} (what your linked "
                f"nodes were seen to hold for this node). Run a node and link it "
                f"(`flud link --home H --node-home DIR`) to earn more")


def credit(terms: QuotaTerms, owner: bytes, given: int) -> int | None:
    """Bytes `owner` may hold here (None: no limit)."""
    quota = terms.explicit(owner)
    if quota is not None:
        return quota
    if terms.unlimited:
        return None
    return terms.grant + int(terms.ratio * max(given, 0))


def admit(terms: QuotaTerms, owner: bytes, held: int, given: int, size: int) -> QuotaRefusal | None:
    """None if a STORE of `size` may go ahead; else the refusal."""
    limit = credit(terms, owner, given)
    if limit is None or held + size <= limit:
        return None
    explicit = terms.explicit(owner) is not None
    return QuotaRefusal(owner, held, size, limit, terms.grant or 0, given, terms.ratio, explicit)


def admit_claim(terms: QuotaTerms, held_claims: int, size: int) -> bool:
    """A node identity storing claims here: within the claim allowance?"""
    if terms.unlimited or terms.claim_allowance is None:
        return True
    return held_claims + size <= terms.claim_allowance


def claims_wanted(terms: QuotaTerms, owner: bytes, held: int) -> int:
    """Bytes of verified claims on `owner`'s linked nodes this node wants,
    so that its credit stays a headroom above what it holds: 0 when there
    is no quota, an explicit one, or nothing held (a node asks claims only
    of owners it holds data for: else every node would claim on every
    linked node of the network)."""
    if terms.unlimited or terms.explicit(owner) is not None or held <= 0:
        return 0
    headroom = max(terms.grant, MIN_HEADROOM)
    short = held + headroom - terms.grant
    if short <= 0:
        return 0
    return int(math.ceil(short / terms.ratio))


def next_claim_size(wanted: int, placed: int) -> int:
    """The size of the next claim to place (0: none): what is missing,
    rounded up to MIN_CLAIM, at most MAX_CLAIM."""
    missing = wanted - placed
    if missing <= 0:
        return 0
    return min(MAX_CLAIM, max(MIN_CLAIM, -(-missing // MIN_CLAIM) * MIN_CLAIM))


def claims_surplus(wanted: int, placed: int) -> bool:
    """True when the claims placed for an owner exceed what is wanted by
    more than one claim (it deleted data), or none are wanted (it holds
    nothing here any more): one is released, so a holder does not keep
    claims nobody needs."""
    return placed > 0 and (wanted == 0 or placed - wanted > MAX_CLAIM)
