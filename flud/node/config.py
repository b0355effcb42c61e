"""What a node is told when it starts: a typed, frozen value.

The CLI builds it from `flud node run`'s arguments (flud/cli/node.py), the
testnet harness builds it directly for the nodes it forks."""
from dataclasses import dataclass

DEFAULT_CAPACITY = 10 * 1024 ** 3
DAY = 86400.0
# How often a client renews its leases on every node it knows
# (flud/client/lease_renewal.py RENEW_EVERY; client and node may not import each
# other, tests/unit/node/test_leases.py holds the two equal). The trash
# keeps an owner's data for at least two of its renewal periods, so one
# renewal missed (a week away, a run with the network down) loses nothing.
CLIENT_RENEWAL_PERIOD = 7 * DAY
MIN_TRASH = 2 * CLIENT_RENEWAL_PERIOD
# A lease shorter than this would trash clients that renew on time.
MIN_LEASE = 2 * CLIENT_RENEWAL_PERIOD
# Give to get (docs/quotas.md). `flud node run` gives every owner this
# much for nothing; a NodeConfig made in code (the testnet) has no quota
# unless it says so (grant None).
DEFAULT_GRANT = 1024 ** 3
DEFAULT_CLAIM_ALLOWANCE = 4 * 1024 ** 3


@dataclass(frozen=True)
class NodeConfig:
    home: str                     # the node's directory (created if missing)
    host: str = "127.0.0.1"       # address to listen on
    port: int = 0                 # 0: chosen by the OS
    join: tuple[str, int] | None = None  # any running node to join through
    # more nodes to join the DHT through, beside `join` (--join given again)
    also_join: tuple = ()
    capacity: int = DEFAULT_CAPACITY  # bytes of storage offered
    memory_log: str | None = None  # a CSV file of memory samples
    memory_budget: int | None = None  # bytes of transfer buffers held at once (None: the default)
    verbose: bool = False         # log at DEBUG
    # Leases (flud/node/leases.py; docs/DESIGN.md says why these defaults):
    lease_seconds: float = 365 * DAY  # an owner not seen this long goes to the trash
    trash_seconds: float = 30 * DAY   # ... and is deleted after this much more
    lease_sweep_interval: float = 3600.0  # seconds between sweeps
    # Give to get (flud/node/quota.py, docs/quotas.md):
    grant: int | None = None      # bytes each owner may store for nothing; None: no quota
    give_ratio: float = 1.0       # bytes of credit per byte its linked nodes were seen to hold
    owner_quotas: tuple = ()      # ((owner id, bytes), ...): explicit quotas, override the formula
    claim_allowance: int = DEFAULT_CLAIM_ALLOWANCE  # bytes of claims one other node may keep here
    ledger_interval: float = 600.0  # seconds between ledger rounds (links, claims, checks)
    relay: bool = True            # offer a bounded relay to NATed nodes (--no-relay: refuse)
