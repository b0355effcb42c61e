"""One memory budget plan per run: how the process's budget (flud/memory.py)
divides between the connections, the large files' segments, the small
files' aggregator and repair's working set. It is computed once, when a run
starts (plan_budget), and handed to every part that reserves from the
budget: the network's send queues (Network.count_sends), the bundle sender's
aggregator bound (repository/bundle_sender.py) and a repair
(repair/repository_check.py), so what one part leaves for the others is the
same number everywhere. Pure: no reactor, no monitor.
"""
from dataclasses import dataclass

# The TLS send queues get this share of the memory budget up front (a
# sixteenth, at most 4 MiB: fifty busy connections queue at most ~4 MB, see
# connection.READ_BUFFER), so what the connections queue is inside the budget too.
SEND_ALLOWANCE_SHARE = 16
SEND_ALLOWANCE_MAX = 4 * 1024 * 1024
# What one TLS connection itself holds while a run uses it: OpenSSL's state
# and record buffers, the two memory BIOs, Twisted's transport (measured
# here: 55 KB a connection idle, about twice that busy). A run reserves it
# for every known node up front, at most an eighth of the budget, so the
# budget bounds the connections too: with 16 uploads and 50 nodes their
# ~5 MB used to sit on top of a budget spent on segments.
CONNECTION_BYTES = 96 * 1024
CONNECTIONS_SHARE = 8


def network_share(budget: int, node_count: int, keep: int = 0) -> dict:
    """What a run reserves from the budget for its connections, by label:
    the send queues' allowance and the connections' own state. Never more
    than budget - keep, so `keep` bytes (a segment) always fit beside it."""
    wanted = {"allowance": min(SEND_ALLOWANCE_MAX, budget // SEND_ALLOWANCE_SHARE),
              "connections": min(node_count * CONNECTION_BYTES, budget // CONNECTIONS_SHARE)}
    room = max(0, budget - keep)
    share = {}
    for label, nbytes in wanted.items():
        share[label] = min(nbytes, room)
        room -= share[label]
    return share


@dataclass(frozen=True)
class BudgetPlan:
    """A run's division of `budget` bytes. allowance, connections: the
    network's share (network_share); segment_footprint: what one large
    file in flight holds, parallel_files of them at once."""
    budget: int
    allowance: int
    connections: int
    segment_footprint: int = 0
    parallel_files: int = 1

    @property
    def network_bytes(self) -> int:
        """What the connections take: the send queues' allowance and their state."""
        return self.allowance + self.connections

    @property
    def large_files_bytes(self) -> int:
        return self.parallel_files * self.segment_footprint

    def left(self, *others: int) -> int:
        """What is left once the network, the large files and `others` are counted."""
        return self.budget - self.network_bytes - self.large_files_bytes - sum(others)

    def repair_bytes(self, wanted: int) -> int:
        """What a repair reserves for its working set of `wanted` bytes: all
        of it if the budget has room beside the network, else what is left
        (a repair's set is bounded by its own constants; it never waits on
        more than the budget could give)."""
        return max(0, min(wanted, self.budget - self.network_bytes))


def plan_budget(budget: int, node_count: int, segment_footprint: int = 0,
                parallel_files: int = 1) -> BudgetPlan:
    """The plan of a run against `node_count` known nodes whose large files
    keep `segment_footprint` bytes each, `parallel_files` at once."""
    share = network_share(budget, node_count, keep=segment_footprint)
    return BudgetPlan(budget, share["allowance"], share["connections"], segment_footprint,
                      parallel_files)


def repair_working_bytes(k: int, n: int, chunk: int, in_flight: int) -> int:
    """What a repair holds at most: `in_flight` objects at once, each with
    k fetched and n - k made pieces of `chunk` bytes (a stream's range, or
    a bundle's share), plus a tar's copy of what one batch made."""
    return in_flight * (2 * n - k) * chunk
