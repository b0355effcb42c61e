"""A node's reputation as one client saw it (flud/trust/reputation.py) and
its sqlite store in the home (flud/client/reputation_store.py)."""
import sqlite3

import pytest

from flud.client.reputation_store import ReputationStore, ReputationStoreError
from flud.trust.placement_rules import MIN_SCORE
from flud.trust.reputation import (
    DAY, DOWN, REQUEST_FAILED, UP, VERIFY_FAILED, VERIFY_OK, VETTED_DAYS, VETTED_VERIFIES,
    new_standing)

T0 = 1_800_000_000.0


def test_a_node_never_seen_scores_one():
    assert new_standing(T0).score(T0) == 1.0


def test_a_lost_share_sinks_a_node_nobody_knows_well():
    standing = new_standing(T0).record(VERIFY_FAILED, T0)
    assert standing.score(T0) < MIN_SCORE


def test_one_loss_in_forty_is_tolerated_one_in_nine_is_not():
    standing = new_standing(T0).record(VERIFY_OK, T0, 39).record(VERIFY_FAILED, T0)
    assert MIN_SCORE < standing.score(T0) < 1.0
    careless = new_standing(T0).record(VERIFY_OK, T0, 8).record(VERIFY_FAILED, T0)
    assert careless.score(T0) < MIN_SCORE


def test_a_weekend_outage_is_forgiven_within_weeks():
    standing = new_standing(T0)
    for day in range(30):
        standing = standing.record(UP, T0 + day * DAY)
    for hour in range(3):   # three checks found it down over a weekend
        standing = standing.record(DOWN, T0 + 30 * DAY + hour * 3600)
    just_after = standing.score(T0 + 31 * DAY)
    assert MIN_SCORE < just_after < 0.95
    for day in range(31, 90):   # up again at every daily check
        standing = standing.record(UP, T0 + day * DAY)
    later = standing.score(T0 + 90 * DAY)
    assert later > just_after and later > 0.97


def test_a_node_down_at_every_check_falls_below_the_threshold():
    standing = new_standing(T0)
    for run in range(12):
        standing = standing.record(DOWN, T0 + run * DAY)
    assert standing.score(T0 + 12 * DAY) < MIN_SCORE


def test_vetting_needs_both_verifies_and_days():
    standing = new_standing(T0).record(VERIFY_OK, T0, VETTED_VERIFIES)
    assert not standing.vetted(T0 + DAY)
    assert standing.vetted(T0 + VETTED_DAYS * DAY)
    fewer = new_standing(T0).record(VERIFY_OK, T0, VETTED_VERIFIES - 1)
    assert not fewer.vetted(T0 + 30 * DAY)


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError):
        new_standing(T0).record("gossip_from_a_peer", T0)


def test_the_store_keeps_standings_across_opens(tmp_path):
    store = ReputationStore(str(tmp_path))
    node = b"n" * 32
    store.record(node, VERIFY_FAILED, T0)
    store.record(node, REQUEST_FAILED, T0 + 10)
    store.close()
    again = ReputationStore(str(tmp_path))
    standing = again.standing(node, T0 + 20)
    assert standing.first_seen == T0 and standing.counts[VERIFY_FAILED] > 0.99
    assert standing.score(T0 + 20) < MIN_SCORE
    assert again.known() == [node]
    again.close()


def test_a_newer_schema_is_refused_not_rewritten(tmp_path):
    ReputationStore(str(tmp_path)).close()
    db = sqlite3.connect(str(tmp_path / "reputation.sqlite"))
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(ReputationStoreError):
        ReputationStore(str(tmp_path))
