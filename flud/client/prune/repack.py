"""Repacking: the live members of mostly-dead bundles stored again in new
bundles, so the old bundle dies whole and its shares can be deleted.

A member moves as it is stored (sealed record, or encrypted small file):
nothing is decrypted into a new form, so every tree record that names it
stays valid; the holder map gets a row for its key with the new range (the
newest row wins), and this home's index points its content there, so later
backups name the new range. Each member is checked before it moves (a
record against its address, a small file against its convergent key): a
damaged one is rebuilt from other shares, as a restore would.
"""
import json

from twisted.internet import defer

from flud.client.repository.blobs import BlobSealer
from flud.client.repository.bundle_ranges import BundleRangeReader
from flud.client.repository.small_contents import ContentCheckFailed, open_small
from flud.client.repository.bundle_sender import record_sender, store_blobs
from flud.client.records import SmallContent


def _stored_bytes_checker(secret, sealer):
    """An opener for a BundleRangeReader: a member's stored bytes as they
    are, if they are what its row says (a record's id, a small file's key)."""

    def checked(content, stored):
        data = bytes(stored)
        if content.method == "blob":
            return data if sealer.blob_id(data).hex() == content.key else None
        try:
            open_small(secret, content._replace(method=content.method or None), data)
        except ContentCheckFailed:
            return None
        return data

    return checked


@defer.inlineCallbacks
def repack(ctx, repo, bundle_ids):
    """Store the live members of these bundles again: [(BlobRef of the new
    range, its bundle id, Bundle)]. This home's index learns the new
    bundles, but its contents follow the move (point_contents) only once
    the map naming it is published: a prune killed before its map write
    left them naming a bundle no map holds, and the next backup's records
    named those ranges (the lifecycle simulation, seed 95003)."""
    db = repo.cache.db
    marks = ",".join("?" * len(bundle_ids))
    members = db.execute(f"SELECT DISTINCT key, bundle, offset, length, kind, size "
                         f"FROM live_members WHERE bundle IN ({marks})",
                         list(bundle_ids)).fetchall()
    fetch = BundleRangeReader(ctx.network, repo.bundles, ctx.coder,
                              _stored_bytes_checker(ctx.secret, BlobSealer(ctx.secret)))
    small = record_sender(ctx)
    try:
        moved_keys = set()
        for key, bundle, offset, length, kind, size in members:
            if key in moved_keys:
                # the same bytes live in two of these bundles (kept records
                # name both: stored again after the map row that led to the
                # first was dropped): one copy moves, the map's row serves both
                continue
            method = "blob" if kind == "blob" else kind.split(":", 1)[1]
            content = SmallContent(size, key, bundle, offset, length, method)
            data = yield fetch.fetch(content)
            yield small.add_blob(key, data)
            moved_keys.add(key)
        _, bundles, challenges = yield store_blobs(small, [])
    finally:
        small.close()
    located = [ref for ref in small.blob_refs if ref.blob_id in moved_keys]
    index = ctx.index
    index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
    index.add_challenges(challenges.items())
    return [(ref, ref.bundle, bundles[ref.bundle]) for ref in located]


def point_contents(index, moved) -> None:
    """Small contents and records whose bytes moved (repack's [(BlobRef,
    bundle id, Bundle)]) now name their new range: once the map that
    names it is published."""
    moved = {ref.blob_id: ref for ref, _, _ in moved}
    updates = []
    for content_id, record in index.content_rows():
        record = json.loads(record)
        ref = moved.get(record.get("key"))
        if ref is not None and record.get("t") == "S":
            record.update(b=ref.bundle, o=ref.offset, l=ref.length)
            updates.append((content_id, record))
    index.add_contents(updates)
    index.add_blobs([ref for ref in moved.values() if index.known_blob(ref.blob_id)])
