"""Where each share of a bundle lives, and where it goes when a node fails."""

from __future__ import annotations

from dataclasses import dataclass

from flud.aggregator.records import BundleRecord, PlacementExhausted, ShareRef


def checked_destinations(nodes: list[str], bundle_id: bytes,
                         count: int, least: int = None) -> list[str]:
    """Validate what place() returned: from `least` (default: count) to
    `count` distinct node names (a network with fewer nodes than n + spares
    still takes bundles; they have fewer spares, or with fewer than n nodes
    and least < n, some node takes more than one share)."""
    nodes = list(nodes)
    least = count if least is None else least
    if not least <= len(nodes) <= count:
        raise ValueError(f"place() returned {len(nodes)} nodes for bundle "
                         f"{bundle_id.hex()}, expected n + spares = {count}")
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"place() returned a node twice for bundle "
                         f"{bundle_id.hex()}: {nodes}; two shares of one "
                         f"bundle must never share a node")
    for node in nodes:
        if not isinstance(node, str) or not node:
            raise ValueError(f"place() returned {node!r} for bundle "
                             f"{bundle_id.hex()}; node names are non-empty "
                             f"strings")
    return nodes


@dataclass
class BundlePlacement:
    """Live placement of one bundle, kept while any of its shares is in an
    open tar or a sealed tar not yet confirmed stored.

    `record` is the BundleRecord while it still waits in the take_bundles()
    queue (so moves are written into it); None once the caller has it.
    """
    bundle_id: bytes
    holders: list[str]           # node of share i
    spares: list[str]            # unused preference-list nodes, in order
    record: BundleRecord | None
    live_members: int = 0

    def choose_spare(self, holders: list[str], failed_nodes: set[str],
                     failed_node: str) -> str:
        """First spare that holds no share of this bundle and has not failed.

        `holders` is passed in so replace() can plan several moves on a copy
        before changing anything.
        """
        for node in self.spares:
            if node not in holders and node not in failed_nodes:
                return node
        raise PlacementExhausted(self.bundle_id, failed_node)

    def move(self, index: int, key: bytes, node: str) -> None:
        """Share `index` now goes to `node` (a spare, or a node that holds
        another share of the bundle already: reduced redundancy)."""
        self.holders[index] = node
        if node in self.spares:
            self.spares.remove(node)
        if self.record is not None:
            self.record.shares[index] = ShareRef(index, key, node)
            if node in self.record.spares:
                self.record.spares.remove(node)
