"""What the harness knows to be true, read from the world directly or with
every node answering honestly (never a client's view): the head the nodes
hold, whether each listed snapshot restores to the tree it recorded, and
whether an object can be read from the nodes that are up now."""
import inspect
import os
import shutil

from twisted.internet import defer

from flud.client.repair.repair_plan import objects_from_map
from flud.client.repair.repository_check import _holder_map
from flud.client.restore.restore_job import Restore
from flud.client.restore.tree_restore import TreeRestore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.client.repository.snapshot_lookup import open_repository
from tests.sim.tree import read_tree, tree_diff

UNREADABLE_STATES = {"lost", "unavailable"}   # what check may call an object a restore cannot read


def open_for_reading(ctx):
    """open_repository as a reader (restore, ls): the nodes' newest head,
    whoever wrote it (where the code knows readers from writers)."""
    if "reading" in inspect.signature(open_repository).parameters:
        return open_repository(ctx, reading=True)
    return open_repository(ctx)


class Head:
    """The nodes' head as the oracle reads it: listed [(record id, SnapshotRecord)]
    oldest first; objects [StoredObject] of its holder map; error: why it
    could not be read (None if it could)."""

    def __init__(self, listed=(), objects=(), error=None, generation=None):
        self.listed = list(listed)
        self.objects = list(objects)
        self.error = error
        self.generation = generation

    @property
    def ids(self):
        return [blob_id for blob_id, _ in self.listed]


def read_head(world, home_path) -> Head:
    """The head with every existing node up and honest."""
    @defer.inlineCallbacks
    def job(clock, home, network, ctx):
        root, repo = yield open_for_reading(ctx)
        if repo is None:
            return Head(error="no version-2 repository on the nodes")
        try:
            listed = yield repo.snapshots()
            objects = objects_from_map(_holder_map(repo.cache), ctx.coder.k)
            if len(listed) != len(repo.index.snapshots):
                return Head(listed, objects, error=f"{len(repo.index.snapshots) - len(listed)} "
                            f"listed snapshot record(s) cannot be read",
                            generation=root.generation)
            return Head(listed, objects, generation=root.generation)
        finally:
            repo.close()
    try:
        head, _ = world.run_job(home_path, job, oracle=True)
    except Exception as err:   # noqa: BLE001: reported as what the oracle could not read
        return Head(error=f"{type(err).__name__}: {err}")
    return head


def needed_objects(world, home_path, listed):
    """The bundle and extent ids a restore of the listed snapshots reads
    (their trees, records and the map itself), by prune's own reach walk
    (whatever it misses, the restore of every listed snapshot finds)."""
    from flud.client.repository.reach import Reach

    @defer.inlineCallbacks
    def job(clock, home, network, ctx):
        _, repo = yield open_for_reading(ctx)
        try:
            reached = yield Reach(repo, listed, ctx).run()
            return set(reached.bundles) | set(reached.extents)
        finally:
            repo.close()
    result, _ = world.run_job(home_path, job, oracle=True)
    return result


def restore_record(world, home_path, record, dest, oracle=True):
    """Restore one snapshot record into dest (oracle: every node up and
    honest; else the nodes a job now finds). (summary, failed lines)."""
    @defer.inlineCallbacks
    def job(clock, home, network, ctx):
        _, repo = yield open_for_reading(ctx)
        try:
            restore = Restore(clock, home, network, ctx.pool, ctx.monitor, ctx.progress,
                              {"k": ctx.coder.k, "n": ctx.coder.n, "bundles": repo.bundles},
                              block_writer=InlineBlockWriter, sync=lambda fd: None)
            summary = yield TreeRestore(restore, repo, record).run(dest)
            return summary, list(restore.failed)
        finally:
            repo.close()
    result, _ = world.run_job(home_path, job, oracle=oracle)
    return result


def restores_exactly(world, home_path, record, expected, scratch) -> list:
    """[] if the record restores (every node up) to `expected`; else what is wrong."""
    dest = os.path.join(scratch, "oracle-restore")
    shutil.rmtree(dest, ignore_errors=True)
    try:
        summary, failed = restore_record(world, home_path, record, dest)
    except Exception as err:   # noqa: BLE001
        return [f"restore raised {type(err).__name__}: {err}"]
    try:
        if summary["failed"]:
            return [f"restore failed: {failed[:3]}"]
        name = os.listdir(dest)
        if len(name) != 1:
            return [f"restore made {name!r} under DEST"]
        return tree_diff(expected, read_tree(os.path.join(dest, name[0])))
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def restore_each_exactly(world, home_path, wanted, scratch) -> dict:
    """restores_exactly for several snapshots [(blob id, record, expected)]
    in one job, the repository (its map) opened once: {blob id: [] or
    what is wrong}. Each is restored whole into a fresh DEST and compared."""
    dest = os.path.join(scratch, "oracle-restore")
    found = {}

    @defer.inlineCallbacks
    def job(clock, home, network, ctx):
        _, repo = yield open_for_reading(ctx)
        try:
            for blob_id, record, expected in wanted:
                shutil.rmtree(dest, ignore_errors=True)
                restore = Restore(clock, home, network, ctx.pool, ctx.monitor, ctx.progress,
                                  {"k": ctx.coder.k, "n": ctx.coder.n, "bundles": repo.bundles},
                                  block_writer=InlineBlockWriter, sync=lambda fd: None)
                try:
                    summary = yield TreeRestore(restore, repo, record).run(dest)
                except Exception as err:   # noqa: BLE001
                    found[blob_id] = [f"restore raised {type(err).__name__}: {err}"]
                    continue
                found[blob_id] = _compared(summary, list(restore.failed), dest, expected)
        finally:
            repo.close()
            shutil.rmtree(dest, ignore_errors=True)
    try:
        world.run_job(home_path, job, oracle=True)
    except Exception as err:   # noqa: BLE001
        for blob_id, _, _ in wanted:
            found.setdefault(blob_id, [f"restore raised {type(err).__name__}: {err}"])
    return found


def _compared(summary, failed, dest, expected) -> list:
    if summary["failed"]:
        return [f"restore failed: {failed[:3]}"]
    name = os.listdir(dest)
    if len(name) != 1:
        return [f"restore made {name!r} under DEST"]
    return tree_diff(expected, read_tree(os.path.join(dest, name[0])))


def keysets(world) -> dict:
    """node id -> the share keys it holds for our owner (nodes that exist)."""
    return {node_id: set(node.store.keys(world.client_id))
            for node_id, node in world.nodes.items() if not node.destroyed}


def missing(share, keys) -> bool:
    """The map names share on a node that exists but does not hold it."""
    node_id = bytes.fromhex(share.node)
    return node_id in keys and bytes.fromhex(share.key) not in keys[node_id]


def readable(world, obj, keys) -> int:
    """Distinct share indexes of obj a restore could fetch right now."""
    found = set()
    for share in obj.shares:
        node_id = bytes.fromhex(share.node)
        node = world.nodes.get(node_id)
        if node is None or node.destroyed or not node.up:
            continue
        key = bytes.fromhex(share.key)
        if key in keys[node_id] and key not in node.corrupt:
            found.add(share.index)
    return len(found)
