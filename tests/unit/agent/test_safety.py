"""The verdict the headline (and notifications) read: each rule of
flud/agent/safety.py, and the status built from a history."""
from flud.agent.safety import ALARM, DAY, OK, WARN, Rules, SafetyState, safety_verdict
from flud.agent.status import build_status

NOW = 2_000_000_000.0
HEALTHY = {"healthy": 40, "degraded": 0, "at_risk": 0, "unavailable": 0, "lost": 0}


def state(**changes):
    base = dict(now=NOW, backup_every=6 * 3600.0, last_success=NOW - 3600, last_failure=None,
                objects=HEALTHY, checked_at=NOW - 1800, verify_bad=0,
                kept_until=NOW + 365 * DAY, paused_until=None)
    return SafetyState(**{**base, **changes})


def codes(verdict):
    return [(r.level, r.code) for r in verdict.reasons]


def test_all_safe_says_so_in_one_line_with_the_lease_date():
    v = safety_verdict(state())
    assert v.level == OK and v.reasons == ()
    assert v.headline.startswith("Your data is safe: last backup 1 h ago; all 40 objects at "
                                 "full redundancy; nodes keep the data until 20")


def test_overdue_turns_amber_then_red():
    assert codes(safety_verdict(state(last_success=NOW - 11 * 3600))) == []
    v = safety_verdict(state(last_success=NOW - 1.5 * DAY))
    assert v.level == WARN and codes(v) == [(WARN, "BACKUP_OVERDUE")]
    v = safety_verdict(state(last_success=NOW - 4 * DAY))
    assert v.level == ALARM and "no successful backup for 4 days" in v.headline
    # an explicit rule wins over the schedule's
    assert safety_verdict(state(last_success=NOW - 5 * 3600),
                          Rules(overdue_warn=4 * 3600)).level == WARN


def test_nothing_backed_up_is_red():
    v = safety_verdict(state(last_success=None, objects=None, checked_at=None, kept_until=None))
    assert v.level == ALARM and codes(v) == [(ALARM, "NOTHING_BACKED_UP")]
    assert v.headline == "At risk: nothing is backed up yet" and v.details == ""


def test_redundancy_rules():
    v = safety_verdict(state(objects={**HEALTHY, "healthy": 37, "degraded": 3}))
    assert v.level == WARN and codes(v) == [(WARN, "OBJECTS_DEGRADED")]
    assert "37 of 40 objects at full redundancy" in v.details
    v = safety_verdict(state(objects={**HEALTHY, "at_risk": 1, "lost": 2}))
    assert v.level == ALARM and codes(v)[0] == (ALARM, "OBJECTS_LOST")
    assert (WARN, "OBJECTS_AT_RISK") in codes(v)
    v = safety_verdict(state(objects=None, checked_at=None))
    assert v.level == OK and "redundancy not checked yet" in v.headline
    assert codes(safety_verdict(state(checked_at=NOW - 8 * DAY))) == [(WARN, "CHECK_STALE")]


def test_failure_verify_lease_and_pause():
    v = safety_verdict(state(last_failure={"at": NOW, "message": "no node answered"}))
    assert v.level == WARN and v.headline == "Needs attention: the last backup failed: no node answered"
    assert codes(safety_verdict(state(verify_bad=2))) == [(WARN, "SHARES_MISSING")]
    assert codes(safety_verdict(state(kept_until=NOW + 60 * DAY))) == [(WARN, "LEASE_ENDING")]
    assert codes(safety_verdict(state(kept_until=NOW + 10 * DAY))) == [(ALARM, "LEASE_ENDING")]
    v = safety_verdict(state(paused_until=NOW + 3600))
    assert v.level == OK and codes(v) == [("info", "PAUSED")]


def test_the_status_carries_the_verdict_from_the_history():
    check = {"counts": {**HEALTHY, "degraded": 2, "repaired": 0}, "nodes": []}
    records = [{"job": "backup", "start": NOW - 5 * DAY, "end": NOW - 5 * DAY + 9, "exit": 0,
                "summary": {"snapshot": 1, "bytes_sent": 10}},
               {"job": "check", "start": NOW - 100, "end": NOW - 90, "exit": 0, "summary": check},
               {"job": "backup", "start": NOW - 60, "end": NOW - 50, "exit": 2,
                "summary": {"error": {"code": "X", "message": "only 2 nodes are known"}}}]
    s = build_status(NOW, "/h", {"backup": (3600.0, None)}, {"backup": None}, {}, records,
                     [], None)
    v = s["verdict"]
    assert v["level"] == ALARM
    assert [r["code"] for r in v["reasons"]] == ["BACKUP_OVERDUE", "BACKUP_FAILED",
                                                 "OBJECTS_DEGRADED"]
    assert "the last backup failed: only 2 nodes are known" in v["reasons"][1]["text"]


def test_the_verdict_of_a_history_alone_is_the_pages():
    from flud.agent.status import verdict_of

    records = [{"job": "backup", "start": NOW - 5 * DAY, "end": NOW - 5 * DAY + 9, "exit": 0,
                "summary": {"snapshot": 1, "bytes_sent": 10}}]
    jobs = {"backup": (3600.0, None)}
    page = build_status(NOW, "/h", jobs, {"backup": None}, {}, records, [], None)["verdict"]
    assert verdict_of(NOW, jobs, records).as_dict() == page
    assert page["level"] == ALARM and page["reasons"][0]["code"] == "BACKUP_OVERDUE"
