"""The lifecycle simulation (tests/sim/history.py) as part of `make test`:
SEEDS histories of STEPS steps with the fault kinds switched on
(FLUD_SIM_FAULTS, default history.DEFAULT_FAULTS), each checked against the
invariants after every step; a failure prints the seed, the history and the
command that replays it. `make simulate SEEDS=N` runs more.

FLUD_SIM_SEEDS, FLUD_SIM_STEPS: how many histories and how long (the
defaults keep this file under a minute on a 2-core machine)."""
import os

import pytest

from tests.sim.history import (FAULT_KINDS, Simulation, Outcome, Violation, faults_from_env,
                               default_base, run_history)

SEEDS = int(os.environ.get("FLUD_SIM_SEEDS", "100"))
STEPS = int(os.environ.get("FLUD_SIM_STEPS", "30"))
PER_KIND_SEEDS = int(os.environ.get("FLUD_SIM_KIND_SEEDS", "2"))
ENABLED = faults_from_env()


@pytest.mark.parametrize("seed", range(1, SEEDS + 1))
def test_a_history_keeps_every_invariant(seed):
    outcome = run_history(seed, ENABLED, STEPS)
    assert outcome.violation is None, outcome.report()


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_each_fault_kind_alone(kind):
    """One kind at a time, so a violation names its cause. Kinds not switched
    on are skipped: FLUD_SIM_FAULTS=all (or a list) runs them."""
    if kind not in ENABLED:
        pytest.skip(f"fault kind {kind!r} is off ({FAULT_KINDS[kind]}); "
                    f"FLUD_SIM_FAULTS={kind} runs it")
    for seed in range(1000, 1000 + PER_KIND_SEEDS):
        outcome = run_history(seed, {kind}, STEPS)
        assert outcome.violation is None, outcome.report()


def test_the_same_seed_makes_the_same_history():
    kinds = {"kill", "burst", "clock"}
    first = run_history(7, kinds, 25)
    second = run_history(7, kinds, 25)
    assert first.history == second.history
    assert first.violation == second.violation
    assert len(first.history) > 1


@pytest.fixture
def base():
    """A scratch directory where histories run (memory-backed: no fsync waits)."""
    import shutil
    import tempfile
    root = default_base()
    os.makedirs(root, exist_ok=True)
    path = tempfile.mkdtemp(dir=root)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_lost_data_is_a_violation(base):
    """The invariants bite: shares that vanish from the nodes (behind the
    client's back, more than the code survives) are found at the next step."""
    outcome = Outcome(3, frozenset())
    sim = Simulation(3, frozenset(), base, outcome)
    sim.op_backup()
    sim.check_invariants("op_backup")          # holds after a plain backup
    owner = sim.world.client_id
    for node in sim.world.nodes.values():
        for key in list(node.store.keys(owner))[::2]:
            node.store.delete(key, owner)
    sim.world.nodes[next(iter(sim.world.nodes))].deletes += 1   # the epoch moves
    with pytest.raises(Violation, match="does not restore|head cannot be read"):
        sim.check_invariants("op_time")


def test_a_check_that_calls_unreadable_data_healthy_is_a_violation(base):
    outcome = Outcome(4, frozenset())
    sim = Simulation(4, frozenset(), base, outcome)
    sim.op_backup()
    judged = {obj.object_id for obj in sim.head().objects}   # the map the check found
    for node_id in list(sim.world.nodes):
        sim.world.set_down(node_id)
    with pytest.raises(Violation, match="restore can fetch only 0"):
        sim._check_honest({"objects": []}, judged)      # a check that saw nothing wrong
