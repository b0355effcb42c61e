"""Prune's bookkeeping (`flud prune`): which unreferenced objects may be
deleted in this run, and what is still to delete. Pure: no clock, no I/O;
the caller gives the time, what is stored, what is referenced, and stores
the state between runs.

An object is what one DELETE removes: a share (or an archive member) on one
node, named by the caller, say "KEY@NODE". An object is deleted only if all
of these hold:
1. no kept snapshot reaches it and no live backup names it in its newest
   checkpoint (a running backup's record of what it stored or reused,
   written when it starts and at least every CHECKPOINT_INTERVAL; one
   silent for CHECKPOINT_STALE is a dead backup and counts no more);
2. it was not stored after a live backup's newest checkpoint (that backup
   may be about to name it; less CLOCK_SKEW: clocks of two machines);
3. it was found so in an earlier run too, and in every run since (a run
   that finds it referenced, or not stored at all, forgets the mark; one
   stored again since its mark starts over);
4. it was stored more than the grace period ago (24 h by default; 0
   allowed), counted from its first sighting when its store time is unknown;
5. every live backup has written a checkpoint since the run that marked it
   (plus CLOCK_SKEW): a backup that reused it before then names it there.

A run is planned (plan_run) and its state written; with backups running
beside it, it would look again (second_look in tests/unit/client/
test_prune_state.py: the snapshots and checkpoints as they are now, since a
backup may have finished meanwhile) and send the deletes that still hold. An
object decided for deletion goes to `pending` first, so a prune killed at
any point leaves every decided object pending, and the next run sends its
DELETE again (a DELETE of what is already gone is done, not an error:
deletes are idempotent). A DELETE that fails (its node is
down) stays pending for later runs; the node's lease expiry is the
backstop.

No backup names an object that a prune has begun to delete: the caller
takes every decided object out of the client index together with writing
this state, before the first DELETE (restic's order). A backup that needs
such content again finds it nowhere in the index and stores it again; its
id is its content's, so it is the same object, now whole again. A pending
object that a kept snapshot references again is "revived": its DELETE is
cancelled (never sent again), since only such a backup can have made it
referenced. Objects are content-addressed: storing a copy "as a new
object" while its DELETE is pending is not possible, so the delete is
cancelled, not raced.

What a backup on a second machine sharing the key would have to do (not
wired: on one home the job lock orders a backup and a prune, and the
index forgets decided objects first): write a last checkpoint naming
everything its snapshot will reference; ask which of those a prune has
decided to delete or deleted (must_restore in the tests' model); and
publish only once each is
either cancelled (a prune's second look saw the checkpoint) or confirmed
gone and stored again. Storing a copy while the DELETE may be in flight is
no answer: the copy has the same content key, so the DELETE removes it.
The tombstones (TOMBSTONE_KEEP) cover backups that read the index before.

Surplus copies (flud/client/prune/surplus.py: a share on a node that the
map's newest row no longer names) are objects here too, "s:KEY@NODE", by
the same rules; their marks and pending deletes are what remembers them
once the map's pages are merged.
"""
from typing import Mapping, NamedTuple, Optional, Tuple

from flud.errors import FludError

CHECKPOINT_INTERVAL = 15 * 60   # a running backup writes a checkpoint at least this often
CHECKPOINT_STALE = 3 * CHECKPOINT_INTERVAL  # silent this long: the backup is dead
CLOCK_SKEW = 5 * 60             # how far two machines' clocks may disagree
DEFAULT_GRACE = 24 * 3600
STATE_META = "prune_state"      # the client index's meta key the state is kept under
TOMBSTONE_KEEP = 7 * 24 * 3600  # deletions remembered for backups that started before them
STATE_VERSION = 1

DELETED, ABSENT, FAILED = "deleted", "absent", "failed"
SURPLUS = "s"                   # a surplus copy's id: "s:KEY@NODE" (one share on one node)


class PruneStateError(FludError):
    """A prune state that cannot be read: newer than this flud, or damaged."""

    code = "PRUNE_STATE"


class StoredObject(NamedTuple):
    """What the repository holds: `stored_at` is when it was stored (unix
    seconds), None if that is not known."""
    id: str
    kind: str
    stored_at: Optional[float] = None


class Mark(NamedTuple):
    """An object found unreferenced in run `run` (at time `seen`), and still so since."""
    run: int
    seen: float
    stored_at: Optional[float]


class Pending(NamedTuple):
    """A delete decided in run `run` and not yet confirmed."""
    run: int
    decided: float
    attempts: int = 0
    error: str = ""


class PruneState(NamedTuple):
    run: int = 0                               # the last run whose plan was written
    marks: Mapping[str, Mark] = {}
    pending: Mapping[str, Pending] = {}
    deleted: Mapping[str, float] = {}          # tombstones: id -> when confirmed

    def pending_objects(self) -> frozenset:
        """Bare bundle and extent ids of the pending deletes ("b:ID", "x:ID";
        a surplus copy, "s:KEY@NODE", is one share, not an object)."""
        return frozenset(oid[2:] for oid in self.pending if oid[:2] in ("b:", "x:"))

    def to_wire(self) -> dict:
        return {"v": STATE_VERSION, "run": self.run,
                "marks": {k: list(m) for k, m in sorted(self.marks.items())},
                "pending": {k: list(p) for k, p in sorted(self.pending.items())},
                "deleted": dict(sorted(self.deleted.items()))}

    @classmethod
    def from_wire(cls, record) -> "PruneState":
        if not isinstance(record, dict) or not isinstance(record.get("v"), int):
            raise PruneStateError("the prune state is damaged (no version)")
        if record["v"] > STATE_VERSION:
            raise PruneStateError(f"the prune state is version {record['v']}, written by a "
                                  f"newer flud: upgrade flud to prune this repository")
        try:
            return cls(int(record["run"]),
                       {k: Mark(*m) for k, m in record["marks"].items()},
                       {k: Pending(*p) for k, p in record["pending"].items()},
                       {k: float(t) for k, t in record["deleted"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PruneStateError(f"the prune state is damaged: {err}") from None


class RunPlan(NamedTuple):
    """run: this run's number. state: to be written BEFORE any delete.
    delete: ids to DELETE now (decided now, or pending from earlier runs).
    marked: first found unreferenced now. waiting: {id: why} unreferenced
    but not deletable yet. revived: pending deletes referenced again: their
    DELETEs are cancelled (a backup stored them again). protected: {id: why} unreferenced by snapshots but kept for
    a live backup."""
    run: int
    state: PruneState
    delete: Tuple[str, ...]
    marked: Tuple[str, ...]
    waiting: Mapping[str, str]
    revived: Tuple[str, ...]
    protected: Mapping[str, str]


def live_checkpoints(checkpoints, now: float) -> list:
    """The checkpoints of backups still running (written within CHECKPOINT_STALE)."""
    return [c for c in checkpoints if now - c.written <= CHECKPOINT_STALE]


def plan_run(state: PruneState, objects, referenced, checkpoints, now: float,
             grace: float = DEFAULT_GRACE) -> RunPlan:
    """One prune run. objects: StoredObjects (everything the repository
    holds); referenced: the ids the kept snapshots reach; checkpoints: every
    backup checkpoint found (stale ones are ignored); grace in seconds."""
    if grace < 0:
        raise ValueError("a grace period is 0 or more")
    run = state.run + 1
    live = live_checkpoints(checkpoints, now)
    named = set(referenced)
    for checkpoint in live:
        named |= checkpoint.refs
    marks, pending = {}, dict(state.pending)
    marked, waiting, protected, revived = [], {}, {}, []
    for obj in objects:
        if obj.id in named:
            continue
        if obj.id in pending:
            decided = pending[obj.id].decided
            if obj.stored_at is None or obj.stored_at <= decided:
                continue  # decided already: retried below
            del pending[obj.id]  # stored again since: a new object, marked afresh
        recent = [c.backup for c in live
                  if obj.stored_at is None or obj.stored_at >= c.written - CLOCK_SKEW]
        if recent:
            protected[obj.id] = f"stored since backup {recent[0]}'s last checkpoint"
            continue
        mark = state.marks.get(obj.id)
        if mark is None or mark.stored_at != obj.stored_at:  # new, or stored again since
            marks[obj.id] = Mark(run, now, obj.stored_at)
            marked.append(obj.id)
            waiting[obj.id] = "first found unreferenced in this run"
            continue
        why = _not_yet(obj, mark, live, now, grace)
        if why:
            marks[obj.id] = mark
            waiting[obj.id] = why
            continue
        pending[obj.id] = Pending(run, now)
    for object_id in list(pending):
        if object_id in named:
            del pending[object_id]
            revived.append(object_id)
    stored_again = {o.id for o in objects if o.id in state.deleted and o.stored_at is not None
                    and o.stored_at > state.deleted[o.id]}
    deleted = {k: t for k, t in state.deleted.items()
               if now - t <= TOMBSTONE_KEEP and k not in stored_again}
    new_state = PruneState(run, marks, pending, deleted)
    return RunPlan(run, new_state, tuple(sorted(pending)), tuple(marked), waiting,
                   tuple(sorted(revived)), protected)


def _not_yet(obj: StoredObject, mark: Mark, live, now: float, grace: float) -> str:
    """Why a marked object may not be deleted yet ("" if it may)."""
    stored_at = obj.stored_at if obj.stored_at is not None else mark.seen
    if now - stored_at < grace:
        return f"stored {_span(now - stored_at)} ago, grace {_span(grace)}"
    for checkpoint in live:
        if checkpoint.written < mark.seen + CLOCK_SKEW:
            return (f"backup {checkpoint.backup} has not written a checkpoint since "
                    f"run {mark.run} found it unreferenced")
    return ""


class Outcome(NamedTuple):
    """What one DELETE gave: DELETED, ABSENT (nothing to delete: done), or
    FAILED (its node down or in error; `error` says so)."""
    status: str
    error: str = ""


def record_deletes(state: PruneState, outcomes: Mapping[str, Outcome],
                   now: float) -> PruneState:
    """The state once these DELETEs answered: done ones leave `pending` for
    the tombstones, failed ones stay (counted) for a later run. Ids of no
    outcome (the run was stopped) stay pending as they were."""
    pending, deleted = dict(state.pending), dict(state.deleted)
    for object_id, outcome in outcomes.items():
        entry = pending.get(object_id)
        if entry is None:
            continue  # revived meanwhile, or answered twice
        if outcome.status in (DELETED, ABSENT):
            del pending[object_id]
            deleted[object_id] = now
        elif outcome.status == FAILED:
            pending[object_id] = entry._replace(attempts=entry.attempts + 1,
                                                error=outcome.error)
        else:
            raise ValueError(f"unknown outcome {outcome.status!r}")
    return state._replace(pending=pending, deleted=deleted)


def pending_object_ids(index) -> frozenset:
    """The bundle and extent ids (as the holder map names them) that prune
    has decided to delete and not yet confirmed gone, from the state kept
    in `index` (anything with get_meta). `flud check` leaves them out of
    its health counts: some of their shares may be gone already, by design.
    A state that cannot be read gives none (counting them is the safe side)."""
    saved = index.get_meta(STATE_META)
    if not saved:
        return frozenset()
    try:
        return PruneState.from_wire(saved).pending_objects()
    except PruneStateError:
        return frozenset()


def surplus_id(key: str, node: str) -> str:
    return f"{SURPLUS}:{key}@{node}"


def is_surplus(object_id: str) -> bool:
    return object_id.startswith(SURPLUS + ":")


def place_of(object_id: str):
    """(share key, node id hex) of a surplus copy's id."""
    key, node = object_id[len(SURPLUS) + 1:].split("@", 1)
    return key, node


def deleted_copies(index) -> frozenset:
    """{(share key, node id hex)} of the surplus copies prune has deleted
    (its tombstones, TOMBSTONE_KEEP), from the state kept in `index`:
    `flud check` can stop reporting them as surplus."""
    saved = index.get_meta(STATE_META)
    try:
        state = PruneState.from_wire(saved) if saved else PruneState()
    except PruneStateError:
        return frozenset()
    return frozenset(place_of(oid) for oid in state.deleted if is_surplus(oid))


def stored_again(state: PruneState, object_ids) -> PruneState:
    """The state once a backup that stored these objects again (whole: it
    found them nowhere in the index) published a snapshot naming them:
    their pending deletes are cancelled and their tombstones dropped, as
    the next prune run would find anyway. Ids as prune names them ("b:ID",
    "x:ID")."""
    ids = set(object_ids)
    return state._replace(pending={k: p for k, p in state.pending.items() if k not in ids},
                          deleted={k: t for k, t in state.deleted.items() if k not in ids})


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 86400:
        return f"{seconds // 86400}d {seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 60}m {seconds % 60}s"


def remember_superseded(index, places, now: float) -> int:
    """Copies (share key, node id hex) that a writer's page merge is about
    to drop the only rows of (repair moved them away): marked as surplus in
    the state kept in `index`, so prune finds them after the merge. A copy
    still in use is not deleted for this: prune checks every surplus id
    against the newest map and the index before it marks or deletes it
    (surplus_objects). Returns how many were new to the state."""
    if not places:
        return 0
    saved = index.get_meta(STATE_META)
    try:
        state = PruneState.from_wire(saved) if saved else PruneState()
    except PruneStateError:
        return 0    # a damaged state: prune reports it; nothing is lost but garbage
    marks, added = dict(state.marks), 0
    for key, node in places:
        oid = surplus_id(key, node)
        if oid not in marks and oid not in state.pending and oid not in state.deleted:
            marks[oid] = Mark(state.run, now, None)
            added += 1
    if added:
        index.set_meta(STATE_META, state._replace(marks=marks).to_wire())
    return added
