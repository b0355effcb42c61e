"""A backup's last steps in the version-2 format (docs/snapshots.md): the
tree of directory records, then the map page, the snapshot record, the map
index and the root record.

The tree is built from a second walk of the roots once every changed file
has landed: each directory's files are answered by the index (what this run
or an earlier one stored for them, as it was scanned), so a directory's
record can be made and sealed at once, and one directory's listing is all
that is held besides the open directories' record ids. A file that was
skipped while reading, or that appeared after the first walk, is left out
(the next snapshot has it). A record whose blob id the index knows is stored
already: an unchanged directory costs a seal and a hash, no STORE.

New records travel with the small files (SmallFiles.add_blob). The map page
of this run (its bundles, where its records are, and the previous run's
final bundles) goes in a bundle of its own, and then the snapshot record and
the map index in another: the index names each page with its bundle's
record, and the root record names the last bundle's, so everything is found
from the key alone.
"""
import json
import os
import socket
import time

from twisted.internet import defer

from flud.client.backup.tree import TreeBuilder
from flud.client.blobs import BlobSealer
from flud.client.holders import MapIndex, MapPage, RootRecord
from flud.client.manifest import put_root_v2, root_names
from flud.client.records import EMPTY, LARGE, SMALL, Bundle
from flud.client.scan import entry_of, list_children
from flud.client.tree import BlobRef, LargeRecord, LargeRef, SmallRef, SnapshotRecord
from flud.client.walk import walk

REPO_META = "repo_v2"   # the index's copy of the repository head (meta key)


def _quiet(path, why):
    """The second walk's skips were said by the first."""


class TreeWriter:
    """Builds the tree of one backup. index: the client index; small: the
    run's SmallFiles (records go out with its bundles); skipped: paths the
    run could not read."""

    def __init__(self, index, sealer: BlobSealer, small, skipped):
        self.index = index
        self.sealer = sealer
        self.small = small
        self.skipped = skipped
        self._new = set()       # blob ids stored by this run (not in the index yet)
        self._outgoing = []     # (blob id, sealed) waiting to be handed to the small files
        self.builder = TreeBuilder(sealer, self._known, self._store)
        self.files = self.bytes = self.dirs = 0

    def _known(self, blob_id: str) -> bool:
        return blob_id in self._new or self.index.known_blob(blob_id)

    def _store(self, blob_id: str, sealed: bytes) -> None:
        self._new.add(blob_id)
        self._outgoing.append((blob_id, sealed))

    @defer.inlineCallbacks
    def _hand_over(self):
        outgoing, self._outgoing = self._outgoing, []
        for blob_id, sealed in outgoing:
            yield self.small.add_blob(blob_id, sealed)

    def _file_ref(self, states):
        def file_ref(entry):
            if entry.path in self.skipped:
                raise KeyError(entry.path)
            state = states[entry.path]       # KeyError: not seen by the first walk
            content = self.index.content(state.content_id)
            if content is None:
                raise KeyError(entry.path)
            # The snapshot holds the file as it was read, not as it is now.
            entry.size, entry.mtime_ns = state.size, state.mtime_ns
            self.files += 1
            self.bytes += state.size
            kind = content["t"]
            if kind == EMPTY:
                return None
            if kind == SMALL:
                return SmallRef(content["key"], content.get("z") or "", content["b"],
                                content["o"], content["l"])
            if kind != LARGE:
                raise KeyError(entry.path)
            blob_id, sealed = self.sealer.seal(LargeRecord(content).encode())
            blob_id = blob_id.hex()
            if not self._known(blob_id):
                self._store(blob_id, sealed)
            return LargeRef(blob_id)
        return file_ref

    @defer.inlineCallbacks
    def build(self, roots, excludes):
        """The blob id of the snapshot's root directory record."""
        tops = []
        for root, name in zip(roots, root_names(roots)):
            try:
                st = os.lstat(root)
            except OSError:
                continue   # said by the first walk
            top = entry_of(root, st, _quiet)
            if top is None:
                continue
            if top.kind == "dir":
                for listing in walk(root, excludes, _quiet, list_children):
                    states = self.index.states_in(listing.path)
                    self.builder.directory(listing, self._file_ref(states))
                    self.dirs += 1
                    yield self._hand_over()
                tops.append((name, top, None))
            elif top.kind == "file":
                try:
                    ref = self._file_ref(self.index.states_in(os.path.dirname(root)))(top)
                except KeyError:
                    continue
                tops.append((name, top, ref))
            else:
                tops.append((name, top, top.target))
        tree = self.builder.root(tops)
        yield self._hand_over()
        return tree


def repo_head(index) -> dict:
    """The index's copy of the repository head: {"generation", "index":
    MapIndex wire, "final": [[bundle id, bundle record]], "snapshot": blob
    ref of the newest snapshot record or None}."""
    return index.get_meta(REPO_META) or {"generation": 0, "index": None, "final": [],
                                          "snapshot": None}


@defer.inlineCallbacks
def _stored(small, blobs):
    """Hand blobs [(blob id, sealed)] to the small files, land them in a
    bundle of their own; returns (their BlobRefs by id, {bundle id: Bundle})."""
    for blob_id, sealed in blobs:
        yield small.add_blob(blob_id, sealed)
    yield small.finish()
    bundles, challenges = small.records()
    wanted = {blob_id for blob_id, _ in blobs}
    refs = {ref.blob_id: ref for ref in small.blob_refs if ref.blob_id in wanted}
    return refs, bundles, challenges


@defer.inlineCallbacks
def publish_tree(ctx, small, run_bundles, run_blobs, tree: str, roots, tags, stats, shares):
    """Store this run's map page, its snapshot record and the new map index,
    and point the root record at them. run_bundles: {bundle id: Bundle} this
    run stored; run_blobs: [BlobRef] of the records it stored; shares: the
    keys of the shares it stored (their VERIFY challenges go in the page).
    Returns (snapshot id, time, the snapshot record's blob id)."""
    index, sealer = ctx.index, BlobSealer(ctx.secret)
    head = repo_head(index)
    previous = index.snapshots()
    snapshot_id = (previous[-1]["id"] + 1) if previous else 1
    old_index = MapIndex.decode(_encode_json(head["index"])) if head["index"] else MapIndex(
        v1=tuple({"id": s["id"], "created": s["created"], "manifest": s.get("manifest_ref")}
                 for s in previous if s.get("manifest_ref")))
    final = {bid: Bundle.from_wire(b) for bid, b in head["final"]}
    blobs = list(run_blobs)
    if head["snapshot"]:
        blobs.append(BlobRef(*head["snapshot"]))
    challenges = [(key, found) for key in sorted(shares)
                  if (found := index.challenges(key)) is not None]
    page = MapPage.of(bundles={**final, **run_bundles}, blobs=blobs, challenges=challenges)
    page_id, page_sealed = sealer.seal(page.encode())
    refs, page_bundles, page_challenges = yield _stored(small, [(page_id.hex(), page_sealed)])
    page_ref = refs[page_id.hex()]
    created = time.time()
    parent = head["snapshot"][0] if head["snapshot"] else None
    record = SnapshotRecord(snapshot_id, created, socket.gethostname(),
                            tuple(os.path.abspath(r) for r in roots), tuple(tags), False,
                            parent, tree, stats)
    snap_id, snap_sealed = sealer.seal(record.encode())
    new_index = MapIndex(old_index.pages + ((page_ref, page_bundles[page_ref.bundle]),),
                         old_index.snapshots + (snap_id.hex(),), old_index.v1)
    index_id, index_sealed = sealer.seal(new_index.encode())
    refs, last_bundles, last_challenges = yield _stored(
        small, [(snap_id.hex(), snap_sealed), (index_id.hex(), index_sealed)])
    snapshot_ref, index_ref = refs[snap_id.hex()], refs[index_id.hex()]
    generation = head["generation"] + 1
    root = RootRecord(snapshot_ref, index_ref, tuple(sorted(last_bundles.items())), generation)
    yield put_root_v2(ctx.network, ctx.secret, ctx.coder.n, root)
    all_final = {**page_bundles, **last_bundles}
    index.add_bundles((bid, b.to_wire()) for bid, b in all_final.items())
    index.add_challenges(page_challenges.items())
    index.add_challenges(last_challenges.items())
    index.add_blobs([page_ref, snapshot_ref, index_ref])
    index.set_meta(REPO_META, {
        "generation": generation, "index": _decode_json(new_index.encode()),
        "final": [[bid, b.to_wire()] for bid, b in sorted(all_final.items())],
        "snapshot": list(snapshot_ref)})
    return snapshot_id, created, snap_id.hex()


def _encode_json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _decode_json(data: bytes):
    return json.loads(data)
