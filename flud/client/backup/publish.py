"""A backup's last step: its manifest built from the index, sealed, stored
on the nodes that keep the root record, and pointed to by a new root
record; the snapshot is then recorded in the index."""
import os
import time

from twisted.internet import defer

from flud.client.manifest import MANIFEST_VERSION, build_manifest, put_root, root_place_key
from flud.client.records import StoredSegment, manifest_ref_to_wire
from flud.client.segments import prepare_segment, store_segment
from flud.crypto import GCM_NONCE_LENGTH, GCM_TAG_LENGTH, derive_key, open_in_place, seal_in_place


@defer.inlineCallbacks
def publish(ctx, entries, roots, started, segment_size, tallies, counters):
    """Build, store and point to the manifest of this run; returns the summary.

    entries: [Entry] of the snapshot; roots: the paths backed up; started:
    ctx.clock() when the run began; segment_size: the manifest is stored in
    segments of this size; tallies and counters: the run's, written into the
    snapshot's summary once the manifest is stored (its STOREs count too)."""
    index, secret, coder = ctx.index, ctx.secret, ctx.coder
    previous = index.snapshots()
    snapshot_id = (previous[-1]["id"] + 1) if previous else 1
    created = time.time()
    head = {"version": MANIFEST_VERSION, "snapshot": snapshot_id, "created": created,
            "roots": [os.path.abspath(r) for r in roots], "k": coder.k, "n": coder.n}
    history = [{"id": s["id"], "created": s["created"], "manifest": s.get("manifest_ref")}
               for s in previous]
    # What the manifest holds while it is sealed and stored is counted.
    memory = ctx.monitor.transfer("manifest", f"manifest of snapshot {snapshot_id}")
    try:
        # Sealed where it was compressed: the manifest is held once (it is
        # held whole while it is stored: ~0.55 MB per GiB backed up).
        blob = build_manifest(index, head, entries, history, headroom=GCM_NONCE_LENGTH)
        memory.hold(len(blob) + GCM_TAG_LENGTH, "sealed")
        seal_in_place(derive_key(secret, "manifest"), blob)
        segments = []
        for start in range(0, len(blob), segment_size):
            prep = yield ctx.pool.run(prepare_segment, secret, coder,
                                      blob[start:start + segment_size])
            # The manifest goes to the nodes that keep the root record: the same
            # few connections serve both, and a total-loss restore finds both there.
            holders = yield store_segment(ctx.network, prep, coder.n, counters, ctx.reactor,
                                          place_key=root_place_key(ctx.network))
            segments.append(StoredSegment(prep.key.hex(), prep.length, prep.block_length,
                                          holders))
        manifest_ref = manifest_ref_to_wire(len(blob), segments)
        # The index keeps the compressed manifest: unsealed where it is.
        compressed = open_in_place(derive_key(secret, "manifest"), blob)
        yield put_root(ctx.network, secret, coder.n,
                       {"snapshot": snapshot_id, "manifest": manifest_ref, "created": created})
        files = sum(1 for e in entries if e.is_file)
        size = sum(e.size for e in entries if e.is_file)
        elapsed = ctx.clock() - started
        summary = {"files": files, "bytes": size, "elapsed": elapsed,
                   "manifest_ref": manifest_ref, **tallies, **counters}
        index.add_snapshot(snapshot_id, created, summary, compressed)
        compressed.release()
    finally:
        memory.close()
    return {"snapshot": snapshot_id, **summary}
