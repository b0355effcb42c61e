"""Where re-created shares go, and the holder map rows a repair produces (pure).

A re-created share goes to a node that holds no share of its object (not
even one that is away: two shares of one object on one node are lost
together), that answered this run, and that holds the fewest shares of this
user so far (a node that joined recently fills first, spreading the risk).
Ties go by rendezvous rank of the object (client/placement.py), so the plan
is the same every time for the same inputs. Bundle shares bound for one node
are grouped, so the caller sends them as one tar STORE as a backup does.
"""
from typing import NamedTuple

from flud.client.repository.holder_map import HolderMap, MapPage
from flud.client.placement import rank
from flud.client.records import ShareHolder
from flud.client.repair.object_health import StoredObject

BUNDLE, EXTENT = "bundle", "extent"


class Placement(NamedTuple):
    object_id: str
    index: int
    key: str
    node: str        # the new holder, hex


def place(wanted, candidates, load: dict, avoid=None, groups=None) -> tuple:
    """([Placement], [(object id, index)] that found no node).

    wanted: [(StoredObject, [index, ...])]; candidates: node ids (hex) that
    may take shares; load: {node: shares it holds}, updated as shares are
    placed; avoid: {object id: nodes not to use for it (they failed it)};
    groups: {node: its diversity group} (flud/trust/placement_rules.py):
    no group takes a share of an object whose other holders (those staying)
    share it. None: every node is its own group.
    """
    avoid = avoid or {}
    members = {}
    for node, group in (groups or {}).items():
        members.setdefault(group, []).append(node)
    placed, unplaced = [], []
    for obj, indexes in wanted:
        taken = obj.holder_nodes() | set(avoid.get(obj.object_id, ()))
        moving = set(indexes)
        held = set()
        if groups is not None:
            held = {groups.get(s.node, s.node) for s in obj.shares if s.index not in moving}
        # In rendezvous order, so min() (which keeps the first of equals)
        # breaks ties between equally loaded nodes by rank.
        free = [node.hex() for node in rank(bytes.fromhex(obj.object_id),
                                            [bytes.fromhex(node) for node in candidates
                                             if node not in taken])]
        keys = {share.index: share.key for share in obj.shares}
        for index in indexes:
            if groups is not None:
                free = [nd for nd in free if groups.get(nd, nd) not in held]
            if not free:
                unplaced.append((obj.object_id, index))
                continue
            node = min(free, key=lambda nd: _load_of(nd, load, groups, members))
            free.remove(node)
            if groups is not None:
                held.add(groups.get(node, node))
            load[node] = load.get(node, 0) + 1
            placed.append(Placement(obj.object_id, index, keys[index], node))
    return placed, unplaced


def _load_of(node: str, load: dict, groups, members: dict) -> int:
    """The shares a node's host (diversity group) holds: a host with many
    ids, each lightly loaded, is one host and weighs as one."""
    if not groups or node not in groups:
        return load.get(node, 0)
    return sum(load.get(member, 0) for member in members[groups[node]])


def by_node(placements) -> dict:
    """{node: [Placement]}: what one tar STORE per node carries."""
    out = {}
    for p in placements:
        out.setdefault(p.node, []).append(p)
    return out


def objects_from_map(holder_map: HolderMap, extent_k: int, stream_lengths=None) -> list:
    """Every bundle and extent of a holder map as a StoredObject. An extent
    does not record its k (every extent of a repository has the client's
    k); its n is its number of share streams. stream_lengths: {extent id:
    its streams' length} where known (stream_length() of its record): those
    are repaired a range at a time (streams.py)."""
    stream_lengths = stream_lengths or {}
    objects = []
    for page in holder_map.pages():
        for bundle_id, bundle in page.bundles:
            objects.append(StoredObject(bundle_id, BUNDLE, bundle.k, bundle.n,
                                        tuple(bundle.holders), bundle.block_length))
        for extent_id, holders in page.extents:
            objects.append(StoredObject(extent_id, EXTENT, extent_k, len(holders),
                                        tuple(holders), stream_lengths.get(extent_id)))
    return objects


def map_page(holder_map: HolderMap, rows: dict) -> MapPage:
    """The holder map page a repair appends: each repaired bundle and extent
    whole, with its moved shares on their new nodes (the newest page wins)."""
    bundles, extents = {}, {}
    for object_id, moves in rows.items():
        bundle = holder_map.bundle(object_id)
        if bundle is not None:
            for index, _key, node in moves:
                bundle = bundle.moved(index, node)
            bundles[object_id] = bundle
            continue
        holders = holder_map.extent(object_id)
        if holders is None:
            # Moves a killed check left in its state for an object a prune
            # has deleted since: nothing is left to point at the new shares
            # (prune finds them as surplus copies).
            continue
        new = {index: node for index, _key, node in moves}
        extents[object_id] = tuple(ShareHolder(h.index, h.key, new.get(h.index, h.node))
                                   for h in holders)
    return MapPage.of(bundles, extents)
