"""`flud forget` and `flud tag`: change which snapshots the repository
lists (by a retention policy, by id) and what they say (tags, protected).

Both write a new map index (the snapshots kept, each a record's blob id)
and a new root; nothing is deleted from the nodes here. What a forgotten
snapshot alone reached becomes unreferenced, and prune deletes it by its
rules (two runs, past the grace period). A tag or protection change writes
a new snapshot record (records are content-addressed, so a changed one is
a new blob) and lists it instead of the old one.
"""

from twisted.internet import defer

from flud.client.repository.blobs import BlobSealer
from flud.client.context import wall_clock
from flud.client.repository.bundle_sender import record_sender
from flud.client.repository.head import Head, write_head
from flud.client.repository.holder_map import MapIndex
from flud.client.prune.retention import SnapshotInfo, decide, render
from flud.client.repository.snapshot_lookup import open_repository
from flud.errors import FludError


class ForgetError(FludError):
    code = "FORGET"


@defer.inlineCallbacks
def _open(ctx):
    _, repo = yield open_repository(ctx)
    if repo is None:
        raise ForgetError("the nodes hold no version-2 repository for this key: "
                          "back up once with this flud first")
    return repo


def info_of(record) -> SnapshotInfo:
    return SnapshotInfo(str(record.snapshot_id), record.time, record.host,
                        tuple(record.paths), tuple(record.tags), record.protected)


@defer.inlineCallbacks
def _write(ctx, repo, listed, records=()):
    """A new head listing `listed` [(blob id, SnapshotRecord)] (oldest first);
    records: new snapshot records [(blob id, sealed)] among them."""
    if not listed:
        raise ForgetError("that would leave no snapshot at all: keep at least one")
    head = Head.of_repository(repo)
    newest_id = listed[-1][0]
    new_ids = {blob_id for blob_id, _ in records}
    newest_bundle = None
    if newest_id not in new_ids:
        ref = (repo.root.snapshot if newest_id == repo.root.snapshot.blob_id
               else repo.cache.blob(newest_id))
        bundle = head.final.get(ref.bundle) or repo.cache.bundle(ref.bundle)
        newest_bundle = (ref, ref.bundle, bundle)
    new_index = MapIndex(repo.index.pages, tuple(blob_id for blob_id, _ in listed),
                         repo.index.v1)
    small = record_sender(ctx)
    try:
        yield write_head(ctx, small, head, new_index, BlobSealer(ctx.secret), newest=newest_id,
                         newest_bundle=newest_bundle, records=records)
    finally:
        small.close()


@defer.inlineCallbacks
def forget(ctx, policy, dry_run, tz, now=wall_clock, say=print):
    """Decide by `policy` (retention.Policy), print the table, and unless
    dry_run list only the kept snapshots. Returns (kept, removed) counts."""
    repo = yield _open(ctx)
    try:
        listed = yield repo.snapshots()
        if len(listed) != len(repo.index.snapshots):
            raise ForgetError("a snapshot record cannot be read: nothing is changed")
        by_id = {str(record.snapshot_id): (blob_id, record) for blob_id, record in listed}
        decisions = decide([info_of(record) for _, record in listed], policy, tz)
        say(render(decisions, policy.group_by, now(), tz, dry_run))
        keep = {d.snapshot.id for d in decisions if d.keep}
        removed = [int(d.snapshot.id) for d in decisions if not d.keep]
        if not dry_run and removed:
            kept = [item for item in listed if str(item[1].snapshot_id) in keep]
            yield _write(ctx, repo, kept)
            ctx.index.remove_snapshots(removed)
        return len(keep), len(removed), [by_id[i][1] for i in sorted(keep, key=int)]
    finally:
        repo.close()


@defer.inlineCallbacks
def tag(ctx, snapshot_ids, add=(), remove=(), protect=None):
    """New records for the named snapshots with tags added/removed and
    protection set (None: unchanged). Returns the records written."""
    repo = yield _open(ctx)
    try:
        listed = yield repo.snapshots()
        wanted = set(snapshot_ids)
        found = {record.snapshot_id for _, record in listed}
        missing = sorted(wanted - found)
        if missing:
            raise ForgetError(f"no snapshot {', '.join(map(str, missing))}")
        sealer = BlobSealer(ctx.secret)
        changed, new_list, written = [], [], []
        for blob_id, record in listed:
            if record.snapshot_id in wanted:
                tags = tuple(t for t in record.tags if t not in remove) + tuple(
                    t for t in add if t not in record.tags)
                record = record._replace(
                    tags=tags, protected=record.protected if protect is None else protect)
                new_id, sealed = sealer.seal(record.encode())
                blob_id = new_id.hex()
                changed.append((blob_id, sealed))
                written.append((blob_id, record))
            new_list.append((blob_id, record))
        yield _write(ctx, repo, new_list, changed)
        for blob_id, record in written:
            _update_local(ctx.index, blob_id, record)
        return [record for _, record in written]
    finally:
        repo.close()


def _update_local(index, blob_id, record) -> None:
    for saved in index.snapshots():
        if saved["id"] == record.snapshot_id:
            summary = {k: v for k, v in saved.items() if k not in ("id", "created")}
            summary.update(tags=list(record.tags), protected=record.protected, record=blob_id)
            index.add_snapshot(record.snapshot_id, saved["created"], summary, None)
