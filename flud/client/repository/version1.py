"""The manifest (the "master file list") and the root record that finds it.

A manifest holds everything a restore needs: every entry (path, kind, mode,
mtime, size), where each content is, the bundles, the VERIFY challenges, and
the list of earlier snapshots. It is JSON, zlib-compressed, sealed with
AES-GCM under a key derived from the user secret, then stored like a large
file (segments, k-of-n). The root record, also sealed, points to the newest
manifest; it is put on the nodes that rank highest for this client, and a
client that lost everything asks every node for it (ROOT_GET).
"""
import json
import os
import zlib

from twisted.internet import defer

from flud.client.repository.holder_map import RootRecord, is_root_v1
from flud.client.placement import rank
from flud.client.records import (bundle_of, entries_to_wire, holder_keys_from_wire,
                                 manifest_ref_segments)
from flud.client.repository.segments import fetch_segment
from flud.crypto import derive_key, open_sealed, seal
from flud.errors import FludError
from flud.protocol.errors import ErrorCode, RemoteError

MANIFEST_VERSION = 1
ROOT_COPIES_EXTRA = 2


class ManifestMissing(FludError):
    """No root record (so no manifest) for this key could be found or stored."""

    code = "MANIFEST_MISSING"


def root_names(roots) -> list:
    """Top-level names under DEST: the roots' base names, made unique."""
    names, seen = [], set()
    for i, root in enumerate(roots):
        name = os.path.basename(os.path.abspath(root).rstrip("/")) or "root"
        if name in seen:
            name = f"{name}-{i}"
        seen.add(name)
        names.append(name)
    return names


def snapshot_paths(roots, paths) -> list:
    """The paths a user named, as the snapshot names them: an absolute path
    under a backed-up root (`/home/me/docs/x`, backed up as `/home/me/docs`)
    becomes the name under DEST (`docs/x`); other paths are kept as given."""
    bases = [(os.path.abspath(r).rstrip("/") or "/", n) for r, n in zip(roots, root_names(roots))]
    named = []
    for path in paths:
        if os.path.isabs(path):
            path = os.path.normpath(path)
            for base, name in bases:
                if path == base or path.startswith(base.rstrip("/") + "/"):
                    path = name + path[len(base.rstrip("/")):]
                    break
        named.append(path)
    return named


# zlib level 1: the manifest is mostly hex keys; level 6 took 4x longer for
# 3% less (measured on a 4000-file manifest), and a no-change backup is
# mostly this.
COMPRESS_LEVEL = 1


def _compress_json(value) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), COMPRESS_LEVEL)


def _seal_json(secret, purpose, value) -> bytes:
    return seal(derive_key(secret, purpose), _compress_json(value))


def _open_json(secret, purpose, blob):
    return json.loads(zlib.decompress(open_sealed(derive_key(secret, purpose), blob)))


class ManifestIncomplete(FludError):
    """An entry's content (or its bundle) is not in the index: an index bug."""

    code = "MANIFEST_INCOMPLETE"


# Entries are JSON-encoded this many at a time, and the JSON goes to the
# compressor in pieces of about FLUSH_AT bytes.
ENTRY_BATCH = 256
FLUSH_AT = 64 * 1024
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class _Compressor:
    """JSON text in pieces in, zlib out: the manifest's JSON is never whole."""

    def __init__(self, headroom: int = 0):
        self._zlib = zlib.compressobj(COMPRESS_LEVEL)
        self._pending = []
        self._size = 0
        self.out = bytearray(headroom)  # room for a seal's nonce in front

    def write(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._size += len(piece)
        if self._size >= FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        self.out += self._zlib.compress(b"".join(self._pending))
        self._pending.clear()
        self._size = 0

    def finish(self) -> bytearray:
        self._flush()
        self.out += self._zlib.flush()
        return self.out


def _write_object(out, rows, wanted, seen) -> None:
    """'{"key":record,...}' of the index rows whose key is wanted (records are
    the index's compact JSON, written as they are); each record goes to seen."""
    out.write(b"{")
    first = True
    for key, blob in rows:
        if key in wanted:
            out.write((b"" if first else b",") + _ENCODE(key).encode() + b":" + blob)
            first = False
            seen(key, blob)
    out.write(b"}")


def build_manifest(index, head: dict, entries: list, history: list,
                   headroom: int = 0) -> bytearray:
    """The zlib-compressed JSON of a manifest (see _compress_json), streamed:
    contents, bundles and challenges are read from the index a row at a time
    and only the keys of what this snapshot uses are kept (a 1 GiB file's
    manifest built as one dict peaked ~8 MB above the upload). head: the
    small fields (version, snapshot, created, roots, k, n). entries: [Entry].
    headroom: zero bytes in front, for seal_in_place."""
    out = _Compressor(headroom)
    out.write(_ENCODE(head)[:-1].encode() + b',"entries":[')
    for start in range(0, len(entries), ENTRY_BATCH):
        batch = _ENCODE(entries_to_wire(entries[start:start + ENTRY_BATCH]))[1:-1].encode()
        out.write((b"," if start else b"") + batch)
    needed = {e.last for e in entries if e.is_file}
    bundles, used, found = set(), set(), []

    # The index's records are read as JSON, not made into records: a row
    # at a time, only their bundle and share keys are kept.
    def content_seen(cid, blob):
        record = json.loads(blob)
        found.append(cid)
        bundle = bundle_of(record)
        if bundle is not None:
            bundles.add(bundle)
        used.update(holder_keys_from_wire(record))

    def bundle_seen(bid, blob):
        found.append(bid)
        used.update(holder_keys_from_wire(json.loads(blob)))

    out.write(b'],"contents":')
    _write_object(out, index.content_rows(), needed, content_seen)
    if len(found) != len(needed):
        raise ManifestIncomplete(f"{len(needed) - len(found)} content record(s) of this "
                                 f"snapshot are missing from the index")
    found.clear()
    out.write(b',"bundles":')
    _write_object(out, index.bundle_rows(), bundles, bundle_seen)
    if len(found) != len(bundles):
        raise ManifestIncomplete(f"{len(bundles) - len(found)} bundle record(s) of this "
                                 f"snapshot are missing from the index")
    out.write(b',"challenges":')
    _write_object(out, index.challenge_rows(), used, lambda key, blob: None)
    out.write(b',"history":' + _ENCODE(history).encode() + b"}")
    return out.finish()


def root_place_key(network) -> bytes:
    return network.client_id + b"root"


class RootNotStored(ManifestMissing):
    """Fewer than a majority of the nodes a root record was sent to took it."""

    code = "ROOT_QUORUM"


def root_quorum(sent: int) -> int:
    """How many of the `sent` nodes must accept a root: a majority, so two
    majorities share a node and a reader that asks every node finds it."""
    return sent // 2 + 1


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
    return rank(root_place_key(network), list(network.nodes))[:n + ROOT_COPIES_EXTRA]


class RootUnconfirmed(FludError):
    """Fewer than a majority of the root's holders answered: the newest
    root may be on the others. `best` is the newest among those that did."""

    code = "ROOT_UNCONFIRMED"

    def __init__(self, message, best=None):
        super().__init__(message)
        self.best = best


@defer.inlineCallbacks
def put_root(network, secret, n, root, everywhere=False):
    """everywhere: every holder must take it (a handover), not a majority."""
    record = _seal_json(secret, "root", root)
    if everywhere:
        fixed = root_holders(network, n)
        failed = set(fixed) - set(network.alive_ids())
        targets = [t for t in fixed if t not in failed]
        needed = max(len(targets), root_quorum(len(fixed)))
    else:
        targets = network.place(root_place_key(network), n + ROOT_COPIES_EXTRA)
        needed = root_quorum(len(targets))
    results = yield defer.DeferredList([network.call(t, "root_put", record) for t in targets],
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
        return (2, root.generation, root.digest())
    return (1, root["snapshot"], json.dumps(root, sort_keys=True))


@defer.inlineCallbacks
def find_root(network, secret, n=None, least=None):
    """Ask every node for our root record; the newest one that opens wins:
    a version-1 root (a dict: snapshot, manifest, created) or a RootRecord.
    n: also require an answer (a root, or none held) from `least` of the
    root's holders (root_holders; a majority by default), else
    RootUnconfirmed."""
    ids = network.alive_ids()
    results = yield defer.DeferredList([network.call(t, "root_get") for t in ids],
                                       consumeErrors=True)
    best = None
    holders = set(root_holders(network, n)) if n else set()
    answered = 0
    for node_id, (ok, blob) in zip(ids, results):
        if node_id in holders and (ok or _holds_none(blob)):
            answered += 1
        if not ok:
            continue
        try:
            root = _open_json(secret, "root", blob)
            if not is_root_v1(root):
                root = RootRecord.decode(json.dumps(root, separators=(",", ":")).encode())
        except Exception:
            continue  # not ours or damaged: the GCM tag (or the record's checks) says so
        if best is None or _root_rank(root) > _root_rank(best):
            best = root
    least = root_quorum(len(holders)) if least is None else least
    if holders and answered < least:
        raise RootUnconfirmed(
            f"only {answered} of the {len(holders)} nodes that hold this home's root record "
            f"answered ({least} are needed to be sure of the newest): "
            f"the newest head may be on the others. Nothing was changed; run it again when "
            f"more nodes are up.", best)
    if best is None:
        raise ManifestMissing(
            "no node holds a manifest for this key. Check that you imported the right key "
            "and that the nodes you joined are the ones you backed up to.")
    return best


def _holds_none(failure) -> bool:
    """A node that answered that it holds no root for us (it did answer)."""
    err = getattr(failure, "value", None)
    return isinstance(err, RemoteError) and err.code == ErrorCode.NOT_FOUND


@defer.inlineCallbacks
def fetch_manifest(network, pool, coder, secret, manifest_ref):
    parts = []
    for segment in manifest_ref_segments(manifest_ref):
        data = yield fetch_segment(network, pool, coder, secret, segment.fetch())
        parts.append(data)
    return _open_json(secret, "manifest", b"".join(parts))
