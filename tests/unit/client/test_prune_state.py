"""flud/client/repository/prune_books.py: an object is deleted only after two runs in a
row found it unreferenced and its grace period passed; running backups'
checkpoints count; state is written before deletes, and deletes are
idempotent. The interleavings of a backup and a prune, and prunes killed at
every point, never lose what a snapshot references (injected times)."""
import itertools
import json
from typing import NamedTuple

import pytest

from flud.client.repository.prune_books import (ABSENT, CHECKPOINT_STALE, CLOCK_SKEW, DELETED, FAILED,
                                     TOMBSTONE_KEEP, Outcome, PruneState,
                                     PruneStateError, StoredObject,
                                     deleted_copies, live_checkpoints, pending_object_ids,
                                     plan_run, stored_again, record_deletes)


class Checkpoint(NamedTuple):
    """A running backup's newest checkpoint: what it stored or reused so far."""
    backup: str
    started: float
    written: float
    refs: frozenset


# What a backup beside a prune would need (not wired: on one home the job
# lock orders them; prune_books.py says what a second machine would do).

def second_look(state: PruneState, referenced, checkpoints, now: float):
    """After the run's state is written, just before its DELETEs: (the
    state, the ids to delete, the ids revived) with what the snapshots and
    live checkpoints reference now. Revived ones leave `pending`."""
    named = set(referenced)
    for checkpoint in live_checkpoints(checkpoints, now):
        named |= checkpoint.refs
    revived = sorted(i for i in state.pending if i in named)
    pending = {i: p for i, p in state.pending.items() if i not in named}
    return state._replace(pending=pending), tuple(sorted(pending)), tuple(revived)


def must_restore(state: PruneState, refs) -> set:
    """Of the ids a backup references (`refs`), those a prune decided to
    delete (pending) or deleted (its index, read before, still listed
    them): the backup stores them again, elsewhere, before it publishes its
    snapshot."""
    return {r for r in refs if r in state.pending or r in state.deleted}


HOUR = 3600
T0 = 1_800_000_000.0


def objs(**stored_at):
    return [StoredObject(i, "share", t) for i, t in stored_at.items()]


def run(state, objects, referenced=(), checkpoints=(), now=T0, grace=0):
    return plan_run(state, objects, referenced, checkpoints, now, grace)


def done(plan, now, status=DELETED):
    return record_deletes(plan.state, {i: Outcome(status) for i in plan.delete}, now)


# --- the two-strike rule and the grace period

def test_an_unreferenced_object_goes_on_the_second_run_in_a_row_not_the_first():
    objects = objs(live=T0 - 100 * HOUR, dead=T0 - 100 * HOUR)
    first = run(PruneState(), objects, referenced={"live"})
    assert first.run == 1 and first.delete == () and first.marked == ("dead",)
    assert first.waiting == {"dead": "first found unreferenced in this run"}
    second = run(first.state, objects, referenced={"live"}, now=T0 + 60)
    assert second.run == 2 and second.delete == ("dead",)
    assert "live" not in second.state.marks and "live" not in second.delete
    state = done(second, T0 + 61)
    assert state.pending == {} and state.deleted == {"dead": T0 + 61}
    third = run(state, objs(live=T0 - 100 * HOUR), referenced={"live"}, now=T0 + 120)
    assert third.delete == () and third.marked == ()


def test_referenced_in_between_starts_the_count_again():
    objects = objs(x=T0 - 100 * HOUR)
    plan = run(PruneState(), objects)
    plan = run(plan.state, objects, referenced={"x"}, now=T0 + 1)   # a snapshot uses it again
    assert plan.state.marks == {}
    plan = run(plan.state, objects, now=T0 + 2)
    assert plan.delete == () and plan.marked == ("x",)
    assert run(plan.state, objects, now=T0 + 3).delete == ("x",)


def test_an_object_missing_from_a_run_loses_its_mark():
    plan = run(PruneState(), objs(x=T0 - 100 * HOUR))
    plan = run(plan.state, objs(), now=T0 + 1)   # its node did not answer the listing
    assert plan.state.marks == {}
    assert run(plan.state, objs(x=T0 - 100 * HOUR), now=T0 + 2).delete == ()


def test_the_grace_period_counts_from_the_store_or_the_first_sighting():
    grace = 24 * HOUR
    objects = objs(old=T0 - 25 * HOUR, young=T0 - 1 * HOUR) + [StoredObject("unknown", "blob")]
    plan = run(PruneState(), objects, grace=grace)
    plan = run(plan.state, objects, now=T0 + 60, grace=grace)
    assert plan.delete == ("old",)
    assert plan.waiting["young"].startswith("stored 1h 1m ago, grace 1d 0h")
    assert "unknown" in plan.waiting          # first seen at T0: its grace counts from there
    plan = run(plan.state, objects, now=T0 + 22 * HOUR, grace=grace)
    assert plan.delete == ("old",)           # still pending: never confirmed
    plan = run(plan.state, objects, now=T0 + 24 * HOUR + 1, grace=grace)
    assert plan.delete == ("old", "unknown", "young")


def test_an_object_stored_again_since_its_mark_starts_over():
    plan = run(PruneState(), objs(x=T0 - 100 * HOUR))
    plan = run(plan.state, objs(x=T0 + 30), now=T0 + 60)   # a backup stored it again
    assert plan.delete == () and plan.marked == ("x",)


def test_grace_must_not_be_negative():
    with pytest.raises(ValueError):
        run(PruneState(), objs(), grace=-1)


# --- running backups

def test_a_live_checkpoint_counts_as_a_reference_and_a_stale_one_does_not():
    objects = objs(a=T0 - 100 * HOUR, b=T0 - 100 * HOUR)
    checkpoint = Checkpoint("backup-1", T0 - HOUR, T0 - 10 * 60, frozenset({"a"}))
    plan = run(PruneState(), objects, checkpoints=[checkpoint])
    plan = run(plan.state, objects, checkpoints=[checkpoint], now=T0 + 60)
    assert "a" not in plan.state.marks and "a" not in plan.delete
    # the backup died: its checkpoint goes stale and "a" is garbage like any other
    later = checkpoint.written + CHECKPOINT_STALE + 1
    plan = run(plan.state, objects, checkpoints=[checkpoint], now=later)
    assert plan.marked == ("a",)
    plan = run(plan.state, objects, checkpoints=[checkpoint], now=later + 60)
    assert "a" in plan.delete


def test_what_a_running_backup_stored_since_its_checkpoint_is_kept():
    checkpoint = Checkpoint("b1", T0 - 20 * 60, T0 - 10 * 60, frozenset())
    objects = objs(fresh=T0 - 5 * 60, skewed=T0 - 10 * 60 - CLOCK_SKEW + 1,
                   older=T0 - 10 * 60 - CLOCK_SKEW - 1) + [StoredObject("unknown", "share")]
    plan = run(PruneState(), objects, checkpoints=[checkpoint])
    assert set(plan.protected) == {"fresh", "skewed", "unknown"}
    assert plan.protected["fresh"] == "stored since backup b1's last checkpoint"
    assert plan.marked == ("older",)


def test_a_mark_waits_for_every_live_backup_to_checkpoint_after_it():
    objects = objs(x=T0 - 100 * HOUR)
    before = Checkpoint("b1", T0 - 30 * 60, T0 - 60, frozenset())
    plan = run(PruneState(), objects, checkpoints=[before])
    plan = run(plan.state, objects, checkpoints=[before], now=T0 + 2 * 60)
    assert plan.delete == () and "has not written a checkpoint since run 1" in plan.waiting["x"]
    # a checkpoint within the clock skew of the mark is not enough either
    close = before._replace(written=T0 + CLOCK_SKEW - 1)
    plan = run(plan.state, objects, checkpoints=[close], now=T0 + CLOCK_SKEW)
    assert plan.delete == ()
    after = before._replace(written=T0 + CLOCK_SKEW)
    plan = run(plan.state, objects, checkpoints=[after], now=T0 + CLOCK_SKEW + 60)
    assert plan.delete == ("x",)


# --- pending deletes: killed runs, nodes down, revived objects

def test_a_prune_killed_after_writing_its_state_sends_the_deletes_next_run():
    objects = objs(x=T0 - 100 * HOUR, y=T0 - 100 * HOUR)
    plan = run(PruneState(), objects)
    plan = run(plan.state, objects, now=T0 + 60)
    assert plan.delete == ("x", "y")
    written = json.loads(json.dumps(plan.state.to_wire()))   # then killed: no DELETE went out
    state = PruneState.from_wire(written)
    again = run(state, objects, now=T0 + 120)
    assert again.delete == ("x", "y")
    # killed half way through its deletes: x went, the answer never recorded
    again2 = run(again.state, objs(y=T0 - 100 * HOUR), now=T0 + 180)
    assert again2.delete == ("x", "y")     # x's DELETE again: idempotent
    state = record_deletes(again2.state, {"x": Outcome(ABSENT), "y": Outcome(DELETED)}, T0 + 181)
    assert state.pending == {} and set(state.deleted) == {"x", "y"}


def test_a_delete_that_fails_stays_pending_for_a_later_run():
    objects = objs(x=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    state = record_deletes(plan.state, {"x": Outcome(FAILED, "node 0a0a down")}, T0 + 2)
    assert state.pending["x"].attempts == 1 and state.pending["x"].error == "node 0a0a down"
    plan = run(state, objects, now=T0 + HOUR)
    assert plan.delete == ("x",)
    state = record_deletes(plan.state, {"x": Outcome(FAILED, "still down")}, T0 + HOUR)
    assert state.pending["x"].attempts == 2
    state = record_deletes(state, {"x": Outcome(DELETED)}, T0 + 2 * HOUR)
    assert state.pending == {} and "x" in state.deleted
    with pytest.raises(ValueError):
        record_deletes(plan.state, {"x": Outcome("maybe")}, T0)


def test_a_pending_delete_stored_again_since_is_not_deleted_but_marked_afresh():
    objects = objs(x=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    assert plan.delete == ("x",)
    plan = run(plan.state, objs(x=T0 + 5), now=T0 + 10)   # a backup stored it again
    assert plan.delete == () and plan.marked == ("x",) and plan.state.pending == {}


def test_a_pending_delete_referenced_again_is_revived_not_deleted():
    objects = objs(x=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    assert plan.delete == ("x",)
    plan = run(plan.state, objects, referenced={"x"}, now=T0 + 2)
    assert plan.revived == ("x",) and plan.delete == () and plan.state.pending == {}


def test_the_second_look_drops_what_became_referenced_since_the_plan():
    objects = objs(x=T0 - 100 * HOUR, y=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    late = Checkpoint("b9", T0, T0 + 2, frozenset({"y"}))
    state, delete, revived = second_look(plan.state, {"x"}, [late], T0 + 3)
    assert delete == () and revived == ("x", "y") and state.pending == {}
    state, delete, revived = second_look(plan.state, (), [], T0 + 3)
    assert delete == ("x", "y") and revived == ()


def test_tombstones_tell_a_backup_what_to_store_again_and_then_expire():
    objects = objs(x=T0 - 100 * HOUR, y=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    assert must_restore(plan.state, {"x", "z"}) == {"x"}                 # pending
    state = record_deletes(plan.state, {"x": Outcome(DELETED)}, T0 + 2)
    assert must_restore(state, {"x", "y", "z"}) == {"x", "y"}           # deleted, pending
    plan = run(state, objs(x=T0 + 10), now=T0 + 20)                       # x stored again
    assert "x" not in plan.state.deleted
    plan = run(state, objs(), now=T0 + 2 + TOMBSTONE_KEEP + 1)
    assert plan.state.deleted == {}


def test_the_state_round_trips_and_a_newer_or_damaged_one_is_refused():
    objects = objs(x=T0 - 100 * HOUR, y=T0 - 100 * HOUR, z=T0 - 100 * HOUR)
    plan = run(run(PruneState(), objs(x=T0 - 100 * HOUR)).state, objects, now=T0 + 1)
    state = record_deletes(plan.state, {"x": Outcome(DELETED)}, T0 + 2)
    assert PruneState.from_wire(json.loads(json.dumps(state.to_wire()))) == state
    with pytest.raises(PruneStateError, match="newer flud"):
        PruneState.from_wire({**state.to_wire(), "v": 2})
    for bad in ({}, [], {"v": 1}, {**state.to_wire(), "marks": {"y": [1]}}):
        with pytest.raises(PruneStateError, match="damaged"):
            PruneState.from_wire(bad)


# --- every interleaving of a backup and prune runs

STEP = 4 * 60   # each event a few minutes after the last: backups checkpoint within 15 min


class World:
    """Nodes' objects, published snapshots, the prune state, a backup."""

    def __init__(self):
        self.stored = {"old": T0 - 100 * HOUR, "junk": T0 - 100 * HOUR,
                       "kept": T0 - 100 * HOUR}
        self.snapshots = [{"kept"}]          # "old" and "junk": a forgotten snapshot's
        self.state = PruneState()
        self.plan = None
        self.checkpoint = None
        self.refs = set()
        self.started = None
        self.now = T0

    def objects(self):
        return [StoredObject(i, "share", t) for i, t in sorted(self.stored.items())]

    def referenced(self):
        return set().union(*self.snapshots)

    def checkpoints(self):
        return [self.checkpoint] if self.checkpoint else []

    # the backup's steps
    def b_start(self):
        self.started = self.now
        self.checkpoint = Checkpoint("b", self.now, self.now, frozenset())

    def b_store(self):
        self.stored["new"] = self.now
        self.refs.add("new")

    def b_reuse(self):           # its index still lists "old": dedup against it
        self.refs.add("old")

    def b_checkpoint(self):      # its last one: everything its snapshot will name
        self.checkpoint = Checkpoint("b", self.started, self.now, frozenset(self.refs))

    def b_restore(self):
        for ref in sorted(must_restore(self.state, self.refs)):
            copy = ref + "'"     # stored again on other nodes: a new object
            self.stored[copy] = self.now
            self.refs = (self.refs - {ref}) | {copy}
        self.checkpoint = Checkpoint("b", self.started, self.now, frozenset(self.refs))

    def b_publish(self):
        self.snapshots.append(set(self.refs))
        self.checkpoint = None

    # the prune's steps
    def p_read(self):            # what it lists and reads, then works out
        self.plan = plan_run(self.state, self.objects(), self.referenced(), self.checkpoints(),
                             self.now, grace=0)

    def p_write(self):           # its state, before any delete
        self.state = self.plan.state

    def p_plan(self):            # both at once
        self.p_read()
        self.p_write()

    def p_delete(self):
        self.state, delete, _ = second_look(self.state, self.referenced(), self.checkpoints(),
                                            self.now)
        outcomes = {}
        for object_id in delete:
            outcomes[object_id] = Outcome(DELETED if self.stored.pop(object_id, None)
                                          else ABSENT)
        self.state = record_deletes(self.state, outcomes, self.now)


BACKUP = ("b_start", "b_store", "b_reuse", "b_checkpoint", "b_restore", "b_publish")


def _interleavings(prune):
    slots = len(BACKUP) + len(prune)
    for where in itertools.combinations(range(slots), len(BACKUP)):
        backup, rest, order = iter(BACKUP), iter(prune), []
        for i in range(slots):
            order.append(next(backup) if i in where else next(rest))
        yield order


@pytest.mark.parametrize("prune", [
    ("p_read", "p_write", "p_delete") * 3,
    ("p_plan", "p_read", "p_write", "p_delete", "p_read", "p_write", "p_delete"),
    ("p_read", "p_write", "p_read", "p_write", "p_delete", "p_read", "p_write", "p_delete"),
    ("p_plan", "p_plan", "p_delete", "p_plan", "p_delete"),   # killed before its deletes
    ("p_plan", "p_plan", "p_plan", "p_delete"),               # killed twice
])
def test_no_interleaving_of_a_backup_and_prunes_loses_a_referenced_object(prune):
    seen_deleted_garbage = 0
    for order in _interleavings(prune):
        world = World()
        for step in order:
            getattr(world, step)()
            world.now += STEP
            # at every moment: every published snapshot's objects are on the nodes
            missing = world.referenced() - set(world.stored)
            assert not missing, (order, step, missing)
        seen_deleted_garbage += "junk" not in world.stored
    # and the rules are not so careful that nothing is ever collected
    assert seen_deleted_garbage > 0


def test_after_the_backup_ends_two_runs_collect_all_garbage():
    world = World()
    for step in BACKUP:
        getattr(world, step)()
        world.now += STEP
    for step in ("p_plan", "p_delete") * 2:
        getattr(world, step)()
        world.now += STEP
    assert set(world.stored) == {"kept", "new", "old"}     # "old" is referenced again
    assert world.state.pending == {} and set(world.state.deleted) == {"junk"}


# --- what check leaves out of its health counts

class _Meta:
    def __init__(self, value):
        self.value = value

    def get_meta(self, key, default=None):
        assert key == "prune_state"
        return self.value if self.value is not None else default


def test_pending_object_ids_are_the_bundles_and_extents_prune_is_deleting():
    objects = [StoredObject(i, "x", T0 - 100 * HOUR)
               for i in ("b:b1", "x:x1", "s:key@node", "b:kept")]
    plan = run(run(PruneState(), objects, referenced={"b:kept"}).state, objects,
               referenced={"b:kept"}, now=T0 + 1)
    state = record_deletes(plan.state, {"b:b1": Outcome(FAILED, "node down")}, T0 + 2)
    assert set(state.pending) == {"b:b1", "x:x1", "s:key@node"}
    # a surplus copy is one share, not an object check counts
    assert state.pending_objects() == {"b1", "x1"}
    assert pending_object_ids(_Meta(state.to_wire())) == {"b1", "x1"}
    state = record_deletes(state, {"b:b1": Outcome(DELETED)}, T0 + 3)
    assert pending_object_ids(_Meta(state.to_wire())) == {"x1"}
    # none kept yet, or one that cannot be read: none left out (the safe side)
    assert pending_object_ids(_Meta(None)) == frozenset()
    assert pending_object_ids(_Meta({"v": 1})) == frozenset()


def test_a_backup_that_stored_a_pending_object_again_cancels_its_delete():
    objects = [StoredObject(i, "x", T0 - 100 * HOUR) for i in ("x:a", "x:b", "s:k@n")]
    plan = run(run(PruneState(), objects).state, objects, now=T0 + 1)
    state = record_deletes(plan.state, {"x:b": Outcome(DELETED), "s:k@n": Outcome(DELETED),
                                        "x:a": Outcome(FAILED, "down")}, T0 + 2)
    assert set(state.pending) == {"x:a"} and set(state.deleted) == {"x:b", "s:k@n"}
    assert deleted_copies(_Meta(state.to_wire())) == {("k", "n")}
    again = stored_again(state, ["x:a", "x:b"])
    assert again.pending == {} and set(again.deleted) == {"s:k@n"}
    assert run(again, objects[:2], referenced={"x:a", "x:b"}, now=T0 + 3).delete == ()


# --- one home: a prune killed anywhere (or a DELETE failing), then a backup
# that deduplicates against its index, then prunes: nothing a snapshot names
# is ever short of shares, because the index forgets before the first DELETE

SHARES = 3


class Home:
    """Nodes' objects (each a set of shares left), the home's index (what a
    backup deduplicates against), published snapshots, the prune state."""

    def __init__(self):
        self.stored = {"old": set(range(SHARES)), "kept": set(range(SHARES))}
        self.index = {"old", "kept"}
        self.snapshots = [{"kept"}]           # "old": only a forgotten snapshot had it
        self.state = run(PruneState(), self.objects(), {"kept"}).state   # "old" marked
        self.now = T0 + 60

    def objects(self):
        return [StoredObject(i, "x", T0 - 100 * HOUR) for i in sorted(self.stored)]

    def referenced(self):
        return set().union(*self.snapshots)

    def prune_steps(self, unindex_first=True, failing=None):
        """A prune run as the steps a kill can fall between."""
        plan = run(self.state, self.objects(), self.referenced(), now=self.now)
        self.state = plan.state
        yield "state written"
        if unindex_first:
            self.index -= set(plan.delete)
            yield "un-indexed"
        outcomes = {}
        for object_id in plan.delete:
            for share in sorted(self.stored.get(object_id, ())):
                if (object_id, share) == failing:
                    outcomes[object_id] = Outcome(FAILED, "node down")
                    continue
                self.stored[object_id].discard(share)
                yield f"{object_id} share {share} deleted"
            outcomes.setdefault(object_id, Outcome(DELETED))
        self.state = record_deletes(self.state, outcomes, self.now)
        for object_id in [i for i, o in outcomes.items() if o.status == DELETED]:
            if not self.stored.get(object_id):
                self.stored.pop(object_id, None)
        if not unindex_first:
            self.index -= {i for i, o in outcomes.items() if o.status == DELETED}
        yield "recorded"

    def backup(self, needs):
        for content in needs:
            if content not in self.index:    # not known: stored (again), whole
                self.stored[content] = set(range(SHARES))
                self.index.add(content)
        self.snapshots.append(set(needs))

    def short(self):
        return {i for i in self.referenced() if len(self.stored.get(i, ())) < SHARES}


def _histories(unindex_first, failing=None):
    """Every kill point of a prune run, each followed by a backup that needs
    "old" again, two whole prune runs and a check after each step."""
    steps = len(list(Home().prune_steps(unindex_first, failing)))
    for kill_after in range(steps + 1):
        home = Home()
        for done, _ in enumerate(home.prune_steps(unindex_first, failing), 1):
            if done == kill_after:
                break                         # killed: the rest never runs
        home.backup({"kept", "old"})          # the deleted bytes are back
        yield kill_after, home
        for _ in range(2):
            home.now += HOUR
            for _ in home.prune_steps(unindex_first, failing):
                yield kill_after, home


@pytest.mark.parametrize("failing", [None, ("old", 1)])
def test_a_killed_or_failing_prune_then_a_backup_never_leaves_a_snapshot_short(failing):
    for kill_after, home in _histories(unindex_first=True, failing=failing):
        assert not home.short(), (kill_after, home.stored, home.snapshots)
    # the same histories in the old order (un-index after the DELETEs) lose data
    assert any(home.short() for _, home in _histories(unindex_first=False, failing=failing))
