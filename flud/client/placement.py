"""Rendezvous (highest-random-weight) placement.

Every (object, node) pair gets a score; an object's shares go to the nodes
with the highest scores. Deterministic, even, and a node joining or leaving
moves only the shares it wins or held.
"""
import blake3


def rank(object_id: bytes, node_ids) -> list:
    """node ids ordered by preference for this object."""
    return sorted(node_ids, key=lambda nid: blake3.blake3(object_id + nid).digest(),
                  reverse=True)
