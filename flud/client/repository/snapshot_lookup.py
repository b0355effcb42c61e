"""Finding snapshots: the repository the nodes hold (version 2) or the
manifests of version 1, by id or the newest, from the local index when it
knows and from the nodes (the key alone) when it does not.

A writer (forget, tag, prune, check) opens the nodes' head only if this
home may write after it (client/repository/head_chain.py); a reader (restore, ls, verify)
that finds the nodes' head older than the one this home saved says so and
reads this home's own."""
import logging

from twisted.internet import defer

from flud.client.repository.head_chain import Saved, StaleRoot, judge_home
from flud.client.repository.holder_map import RootRecord
from flud.client.repository.root_store import ManifestMissing, RootUnconfirmed, find_root
from flud.client.repository.version1_reader import fetch_manifest
from flud.client.repository.reader import Repository
from flud.client.repository.record_cache import RecordCache
from flud.errors import FludError

log = logging.getLogger("flud.client")


class NoSuchSnapshot(FludError):
    code = "NO_SUCH_SNAPSHOT"


class Found:
    """A snapshot found: version 1 (manifest) or version 2 (repo and record).
    close() releases the repository's map cache."""

    def __init__(self, manifest=None, repo=None, record=None, record_id=None):
        self.manifest, self.repo, self.record, self.record_id = manifest, repo, record, record_id

    @property
    def snapshot_id(self) -> int:
        return self.manifest["snapshot"] if self.manifest else self.record.snapshot_id

    def close(self) -> None:
        if self.repo is not None:
            self.repo.close()


@defer.inlineCallbacks
def open_repository(ctx, report_bad=lambda node, key, why: None,
                    count_retrieves=lambda n: None, reading=False, root=None,
                    least=None, cached=False):
    """(root, Repository or None): the newest root record on the nodes
    (or `root`, as given); a Repository (opened) if it is version 2.
    The nodes' root is judged against this home's head
    (client/repository/head_chain.py): a writer gets StaleRoot, ForkedHead
    or OtherWriter, and RootUnconfirmed when it hears fewer than a majority
    of the root's holders; a reader (reading=True) gets this home's own
    head where the nodes' is older. least: how many of the root's holders
    a writer must hear (None: a majority; `check --repair` asks for one,
    repository/head.py CHECK_LEAST says why). cached: a reader that may
    read records from this home's record cache (restore, ls, find, diff;
    never verify or a writer: they judge what the nodes hold)."""
    unconfirmed = ""
    if root is None:
        root, unconfirmed = yield _judged_root(ctx, reading, least)
    if not isinstance(root, RootRecord):
        return root, None
    repo = Repository(ctx, report_bad, count_retrieves,
                      RecordCache(ctx.home.path) if cached and reading else None)
    repo.unconfirmed = unconfirmed
    try:
        yield repo.open(root)
    except BaseException:
        repo.close()
        raise
    return root, repo


@defer.inlineCallbacks
def _judged_root(ctx, reading, least=None):
    """(the root to read, "" or why it may not be the newest)."""
    unconfirmed = ""
    try:
        # a majority of the root's holders, for a writer (head.nodes_root says
        # why) as for a reader that wants to be sure
        found = yield find_root(ctx.network, ctx.secret, ctx.home.config["n"])
    except RootUnconfirmed as err:
        if not reading and least is None:
            raise   # a writer that hears fewer writes nothing
        if not reading:
            # `check --repair` (least): it goes on hearing fewer, and says so
            # (what it writes then is a repair root: repository/head.py)
            found = yield find_root(ctx.network, ctx.secret, ctx.home.config["n"], least=least)
            unconfirmed = str(err)
        else:
            # A reader takes the newest it can see, and says it may not be the
            # newest, unless it is the head this home wrote last itself.
            found, unconfirmed = err.best, str(err)
            saved = Saved(ctx.index).root
            if saved is not None and isinstance(found, RootRecord) \
                    and found.digest() == saved.digest():
                unconfirmed = ""
            else:
                log.warning("%s", unconfirmed)
    except ManifestMissing:
        found = None
    try:
        judge_home(ctx, found)
    except StaleRoot:
        saved = Saved(ctx.index)
        if not reading or saved.root is None:
            raise
        newest = f"generation {found.generation}" if isinstance(found, RootRecord) else "none"
        log.warning("the nodes' newest root (%s) is older than the head this home saved "
                    "(generation %d): the nodes holding the newest are away, or one answered "
                    "with an old root. Reading this home's head instead.", newest,
                    saved.generation)
        return saved.root, ""
    except FludError:
        if not reading:
            raise   # a reader reads the nodes' newest, whoever wrote it
    if found is None:
        raise ManifestMissing(
            "no node holds a manifest for this key. Check that you imported the right key "
            "and that the nodes you joined are the ones you backed up to.")
    return found, unconfirmed


@defer.inlineCallbacks
def find_snapshot(ctx, snapshot=None, report_bad=lambda node, key, why: None,
                  count_retrieves=lambda n: None, cached=False):
    """The snapshot `snapshot` (an id) or the newest, as a Found. cached:
    its records may come from the home's record cache (open_repository)."""
    index = ctx.index
    known = index.snapshots()
    if known and (snapshot is None or any(s["id"] == snapshot for s in known)):
        chosen = known[-1] if snapshot is None else next(s for s in known if s["id"] == snapshot)
        manifest = index.manifest(chosen["id"])
        if manifest is not None:
            return Found(manifest=manifest)
    root, repo = yield open_repository(ctx, report_bad, count_retrieves, reading=True,
                                       cached=cached)
    if repo is None:
        manifest = yield fetch_manifest(ctx.network, ctx.pool, ctx.coder, ctx.secret,
                                        root["manifest"])
        if snapshot is not None and snapshot != manifest["snapshot"]:
            older = {h["id"]: h["manifest"] for h in manifest["history"]}
            if not older.get(snapshot):
                raise NoSuchSnapshot(f"no snapshot {snapshot}; the newest is "
                                     f"{manifest['snapshot']}")
            manifest = yield fetch_manifest(ctx.network, ctx.pool, ctx.coder, ctx.secret,
                                            older[snapshot])
        return Found(manifest=manifest)
    try:
        found = yield _in_repository(ctx, repo, snapshot)
    except BaseException:
        repo.close()
        raise
    return found


@defer.inlineCallbacks
def _in_repository(ctx, repo, snapshot):
    if snapshot is None:
        record = yield repo.snapshot(repo.root.snapshot.blob_id)
        return Found(repo=repo, record=record, record_id=repo.root.snapshot.blob_id)
    for entry in repo.index.v1:
        if entry.get("id") == snapshot and entry.get("manifest"):
            repo.close()
            manifest = yield fetch_manifest(ctx.network, ctx.pool, ctx.coder, ctx.secret,
                                            entry["manifest"])
            return Found(manifest=manifest)
    found = yield numbered(repo, snapshot)
    if found is None:
        raise NoSuchSnapshot(f"no snapshot {snapshot} in the repository")
    blob_id, record = found
    return Found(repo=repo, record=record, record_id=blob_id)


@defer.inlineCallbacks
def numbered(repo, snapshot: int):
    """(blob id, SnapshotRecord) of the kept snapshot numbered `snapshot`,
    or None. The map index lists the kept snapshots oldest first, and
    numbers only grow, so a binary search opens about log2(kept) records,
    not every one; where it finds nothing (or a record cannot be read),
    the records it has not opened are read in order, as before, so a list
    out of order still finds what it holds."""
    ids = list(repo.index.snapshots)
    opened = set()
    low, high = 0, len(ids) - 1
    while low <= high:
        middle = (low + high) // 2
        try:
            record = yield repo.snapshot(ids[middle])
        except FludError:   # BlobDamaged, BadRecord, NewerFormat, a failed fetch
            break
        opened.add(middle)
        if record.snapshot_id == snapshot:
            return ids[middle], record
        if record.snapshot_id < snapshot:
            low = middle + 1
        else:
            high = middle - 1
    for position, blob_id in enumerate(ids):
        if position in opened:
            continue
        try:
            record = yield repo.snapshot(blob_id)
        except FludError:
            continue
        if record.snapshot_id == snapshot:
            return blob_id, record
    return None
