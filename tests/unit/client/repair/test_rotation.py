import random

import pytest

from flud.client.repair.rotation import (
    DAY, EVERYTHING, WEEK, BadDataSubset, DataSubset, RotationState, parse_subset, plan_run,
    select_objects, slot)

KEYS = [f"{i:064x}" for i in range(3000)]


def _covered(window):
    return {k for k in KEYS if window.contains(slot(k))}


def test_daily_runs_cover_every_share_once_a_week():
    state, seen, counts = RotationState(), set(), []
    for day in range(7):
        window, state = plan_run(state, 1000.0 + day * DAY, interval=DAY)
        got = _covered(window)
        assert not got & seen          # no share twice in one cycle
        seen |= got
        counts.append(len(got))
    assert seen == set(KEYS)
    assert all(300 < c < 560 for c in counts)   # about a seventh each


def test_a_first_run_by_hand_checks_everything_a_scheduled_one_its_part():
    window, state = plan_run(RotationState(), 50.0 + WEEK)
    assert window == EVERYTHING and state == RotationState(50.0, 1.0)
    window, state = plan_run(RotationState(), 50.0 + DAY, interval=DAY)
    assert window.fraction == pytest.approx(1 / 7) and state.epoch == 50.0


def test_missed_runs_are_caught_up_by_the_next():
    state = RotationState(0.0, 0.0)
    window, state = plan_run(state, 1 * DAY)
    first = _covered(window)
    window, state = plan_run(state, 4 * DAY)          # days 2 and 3 missed
    caught = _covered(window)
    assert abs(window.fraction - 3 / 7) < 1e-9
    window, state = plan_run(state, 7 * DAY)
    assert first | caught | _covered(window) == set(KEYS)


def test_a_run_across_the_end_of_a_cycle_wraps():
    state = RotationState(0.0, 6.5 / 7)
    window, state = plan_run(state, 7.5 * DAY)
    assert len(window.ranges) == 2 and abs(window.fraction - 1 / 7) < 1e-9
    assert state.position == pytest.approx(7.5 / 7)


def test_more_than_a_cycle_behind_covers_everything_once():
    window, state = plan_run(RotationState(0.0, 0.2), 30 * DAY)
    assert window == EVERYTHING and state.position == pytest.approx(30 / 7)
    window, _ = plan_run(state, 31 * DAY)
    assert window.fraction == pytest.approx(1 / 7)


def test_a_second_run_at_the_same_time_takes_nothing_more():
    window, state = plan_run(RotationState(0.0, 0.0), DAY)
    again, same = plan_run(state, DAY)
    assert again.fraction == 0 and same == state
    assert RotationState.from_wire(state.to_wire()) == state


def test_a_weekly_run_takes_the_whole_cycle():
    window, _ = plan_run(RotationState(0.0, 0.0), WEEK)
    assert _covered(window) == set(KEYS)


def test_n_of_N_parts_split_the_objects_and_together_cover_them():
    rng = random.Random(1)
    parts = [select_objects(KEYS, parse_subset(f"{n}/5"), rng) for n in range(1, 6)]
    assert set().union(*parts) == set(KEYS)
    assert sum(len(p) for p in parts) == len(KEYS)
    assert select_objects(KEYS, parse_subset("2/5"), random.Random(9)) == parts[1]   # stable


def test_a_fraction_picks_about_that_share_at_random():
    assert parse_subset("10%") == DataSubset(fraction=0.1)
    picked = select_objects(KEYS, parse_subset("0.25"), random.Random(2))
    assert 600 < len(picked) < 900
    assert select_objects(KEYS, None, random.Random(2)) == set()


@pytest.mark.parametrize("text", ["0/5", "6/5", "a/b", "0", "1.5", "150%", "x"])
def test_bad_subsets_are_refused_with_their_text(text):
    with pytest.raises(BadDataSubset) as info:
        parse_subset(text)
    assert text in str(info.value) and info.value.code == "BAD_DATA_SUBSET"
