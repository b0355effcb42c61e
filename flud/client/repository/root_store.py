"""The root record on the nodes: sealed (JSON, zlib-compressed, AES-GCM
under a key derived from the user secret), put on the nodes that rank
highest for this client (a majority must take it), and found by asking
every node (ROOT_GET), so a client that lost everything finds its head. A
version-2 root (holder_map.RootRecord) names the head; a version-1 root (a
dict) names a version-1 manifest (version1_reader.py reads it).
"""
import json
import zlib

from twisted.internet import defer

from flud.client.repository.blobs import open_json
from flud.client.repository.holder_map import RootRecord, is_root_v1
from flud.client.placement import rank
from flud.crypto import derive_key, seal
from flud.errors import FludError
from flud.protocol.errors import ErrorCode, RemoteError

ROOT_COPIES_EXTRA = 2


class ManifestMissing(FludError):
    """No root record (so no manifest) for this key could be found or stored."""

    code = "MANIFEST_MISSING"


# zlib level 1: the manifest is mostly hex keys; level 6 took 4x longer for
# 3% less (measured on a 4000-file manifest), and a no-change backup is
# mostly this.
COMPRESS_LEVEL = 1


def _compress_json(value) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), COMPRESS_LEVEL)


def _seal_json(secret, purpose, value) -> bytes:
    return seal(derive_key(secret, purpose), _compress_json(value))


def root_place_key(network) -> bytes:
    return network.client_id + b"root"


class RootNotStored(ManifestMissing):
    """Fewer than a majority of the nodes a root record was sent to took it."""

    code = "ROOT_QUORUM"


def root_quorum(sent: int) -> int:
    """How many of the `sent` nodes must accept a root: a majority, so two
    majorities share a node and a reader that asks every node finds it."""
    return sent // 2 + 1


def handover_quorum(size: int) -> int:
    """How many of a home set of `size` nodes a handover must reach (and
    every one of it that answers): so many that any majority a writer hears
    meets it at two nodes (one of them may replay an old root). That is a
    majority of an even set, one node more of an odd one (7 holders: 5;
    with 4, a writer hearing the 3 others and one replaying met none)."""
    return min(size, size - size // 2 + 1)


def holder_set_of(network, n) -> tuple:
    """The root's home set as a root record names it (hex ids, sorted)."""
    return tuple(sorted(node_id.hex() for node_id in root_holders(network, n)))


def root_holders(network, n) -> list:
    """The root's home set: the n + ROOT_COPIES_EXTRA nodes that rank
    highest among every node known, up or not (fixed, not the ones up now).
    A root is put on the highest ranked nodes up now (a majority of those
    must take it: nodes that left for good, still on the member list, must
    not stop every backup and repair), which is this set while its nodes
    are up. A handover (`flud adopt`) must reach every node of the set that
    answers and at least a majority of it, and every writer must hear a
    majority of the set (client/repository/head.py nodes_root): the two share a node,
    so the home that wrote before meets the new writer's root and is
    refused, even if one node it hears replays an old root. A reader
    without a head of its own that hears from fewer than a majority of the
    set says it may not have found the newest root."""
    trust = getattr(network, "trust", None)
    if trust is not None:   # the set put_root places on: friends, one per host, reputation
        return trust.choose(root_place_key(network), network.nodes, list(network.nodes),
                            n + ROOT_COPIES_EXTRA)
    return rank(root_place_key(network), list(network.nodes))[:n + ROOT_COPIES_EXTRA]


class RootUnconfirmed(FludError):
    """Fewer than a majority of the root's holders answered: the newest
    root may be on the others. `best` is the newest among those that did."""

    code = "ROOT_UNCONFIRMED"

    def __init__(self, message, best=None, current=True):
        super().__init__(message)
        self.best = best
        # whether a majority of the home set as it is now did answer (only
        # the set the newest root heard names fell short)
        self.current = current


@defer.inlineCallbacks
def put_root(network, secret, n, root, everywhere=False):
    """everywhere: every holder must take it (a handover), not a majority."""
    record = _seal_json(secret, "root", root)
    if everywhere:
        fixed = root_holders(network, n)
        failed = set(fixed) - set(network.alive_ids())
        targets = [t for t in fixed if t not in failed]
        needed = max(len(targets), handover_quorum(len(fixed)))
    else:
        targets = network.place(root_place_key(network), n + ROOT_COPIES_EXTRA)
        needed = root_quorum(len(targets))
    results = yield defer.DeferredList([network.root_put(t, record) for t in targets],
                                       consumeErrors=True)
    accepted = sum(1 for ok, _ in results if ok)
    if not targets or accepted < needed:
        raise RootNotStored(
            f"only {accepted} of the {len(targets)} nodes asked took the new root record "
            f"({needed} are needed): the head did not move, and what this "
            f"run stored is kept for the next run. Run it again when more nodes are up.")


def put_root_v2(network, secret, n, root: RootRecord, everywhere=False):
    """A version-2 root record, sealed and placed as version 1's is."""
    return put_root(network, secret, n, json.loads(root.encode()), everywhere)


def _root_rank(root) -> tuple:
    """Version 2 after version 1 (a repository moves forward only); within a
    version, the newest generation or snapshot; two different roots of one
    generation (a fork) are ordered by their digest, so every reader picks
    the same one whatever order the nodes answer in."""
    if isinstance(root, RootRecord):
        return (2, root.generation, root.repairs, root.digest())
    return (1, root["snapshot"], json.dumps(root, sort_keys=True))


@defer.inlineCallbacks
def find_root(network, secret, n=None, least=None):
    """Ask every node for our root record; the newest one that opens wins:
    a version-1 root (a dict: snapshot, manifest, created) or a RootRecord.
    n: also require an answer (a root, or none held) from `least` of the
    root's holders (root_holders; a majority by default), else
    RootUnconfirmed."""
    ids = network.alive_ids()
    results = yield defer.DeferredList([network.root_get(t) for t in ids],
                                       consumeErrors=True)
    best = None
    holders = set(root_holders(network, n)) if n else set()
    answered = 0
    opened = {}   # one put sends the same sealed bytes to every node: open each once
    for node_id, (ok, blob) in zip(ids, results):
        if node_id in holders and (ok or _holds_none(blob)):
            answered += 1
        if not ok:
            continue
        key = blob if isinstance(blob, bytes) else id(blob)
        if key not in opened:
            opened[key] = _open_root(secret, blob)
        root = opened[key]
        if root is None or root is best:
            continue  # not ours or damaged (the GCM tag or the record's checks say so), or seen
        if best is None or _root_rank(root) > _root_rank(best):
            best = root
    needed = root_quorum(len(holders)) if least is None else least
    if holders and answered < needed:
        raise RootUnconfirmed(
            f"only {answered} of the {len(holders)} nodes that hold this home's root record "
            f"answered ({needed} are needed to be sure of the newest): "
            f"the newest head may be on the others. Nothing was changed; run it again when "
            f"more nodes are up.", best, current=False)
    if holders and isinstance(best, RootRecord) and best.holder_set:
        # the set that root was written to: nodes that joined since (empty
        # successors of lost disks) say nothing about a root put before
        named = set(best.holder_set)
        heard = sum(1 for node_id, (ok, blob) in zip(ids, results)
                    if node_id.hex() in named and (ok or _holds_none(blob)))
        needed = root_quorum(len(named)) if least is None else least
        if heard < needed:
            raise RootUnconfirmed(
                f"only {heard} of the {len(named)} nodes the newest root heard (generation "
                f"{best.generation}) was written to answered ({needed} are needed to be "
                f"sure of the newest; nodes that joined the set since do not count: a "
                f"newer root put before they came is not on them): the newest head may be "
                f"on the others. Nothing was changed; run it again when more nodes are up.",
                best)
    if best is None:
        raise ManifestMissing(
            "no node holds a manifest for this key. Check that you imported the right key "
            "and that the nodes you joined are the ones you backed up to.")
    return best


def _open_root(secret, blob):
    """A root record (RootRecord, or a version-1 dict) from a node's sealed
    answer; None if it is not ours or damaged."""
    try:
        root = open_json(secret, "root", blob)
        if not is_root_v1(root):
            root = RootRecord.decode(json.dumps(root, separators=(",", ":")).encode())
    except Exception:
        return None
    return root


def _holds_none(failure) -> bool:
    """A node that answered that it holds no root for us (it did answer)."""
    err = getattr(failure, "value", None)
    return isinstance(err, RemoteError) and err.code == ErrorCode.NOT_FOUND
