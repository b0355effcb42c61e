"""The page and the notices speak from one verdict (flud/agent/safety.py):
one rule for a successful backup, thresholds from agent.toml's [status]
(red for an overdue backup is [notify] overdue_after), a "safety" notice
when the page turns red for another reason, and the page saying what the
notifier and the battery pause are doing."""
import pytest

from flud.agent import notify
from flud.agent.config import ConfigError, parse
from flud.agent.history import History
from flud.agent.page import render
from flud.agent.safety import SafetyState, safety_verdict
from flud.agent.status import verdict_of
from tests.unit.agent.test_lifecycle import BASE, PING, DAY, Deliveries, make
from tests.unit.agent.test_service import make as make_plain

JOBS = {"backup": (DAY, None)}


def codes(verdict):
    return {r.code for r in verdict.reasons}


def test_a_backup_that_exits_1_without_a_snapshot_is_a_failure_on_the_page_too():
    failed = [{"job": "backup", "start": 10, "end": 20, "exit": 1, "summary": {"skipped": 3}}]
    verdict = verdict_of(100, JOBS, failed)
    assert {"NOTHING_BACKED_UP", "BACKUP_FAILED"} <= codes(verdict)
    assert notify.last_success(failed) is None
    made = [{"job": "backup", "start": 10, "end": 20, "exit": 1,
             "summary": {"snapshot": 4, "skipped": 1}}]
    verdict = verdict_of(100, JOBS, made)
    assert not {"NOTHING_BACKED_UP", "BACKUP_FAILED"} & codes(verdict)
    assert notify.last_success(made) == 20


def test_the_verdicts_thresholds_come_from_agent_toml():
    config = parse(BASE + '[status]\nlease_warn = "20d"\nlease_alarm = "10d"\n'
                          'check_stale = "2d"\n[notify]\noverdue_after = "5d"\n')
    rules = config.rules
    assert (rules.lease_warn, rules.lease_alarm, rules.check_stale, rules.overdue_alarm) == \
        (20 * DAY, 10 * DAY, 2 * DAY, 5 * DAY)
    now = 100 * DAY
    state = SafetyState(now=now, backup_every=DAY, last_success=now - 4 * DAY,
                        last_failure=None, objects=None, checked_at=None,
                        kept_until=now + 15 * DAY)
    verdict = safety_verdict(state, rules)
    # 4 days: amber, not red (red after 5 days here, 3 by default); the lease
    # ends in 15 days: amber (red under 10 days here, under 30 by default)
    assert verdict.level == "warn" and {r.level for r in verdict.reasons} == {"warn"}
    assert safety_verdict(state).level == "alarm"
    with pytest.raises(ConfigError, match="status.*lease_alarm"):
        parse(BASE + '[status]\nlease_warn = "5d"\nlease_alarm = "10d"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        parse(BASE + '[status]\nlease_warning = "5d"\n')


def lost(start, count):
    return {"job": "check", "start": start, "end": start + 1, "exit": 2,
            "summary": {"counts": {"healthy": 5, "lost": count}}}


def test_a_red_verdict_sends_a_safety_notice_once_then_on_its_own_schedule(tmp_path):
    deliveries = Deliveries()
    agent, clock, spawn = make(tmp_path, BASE + PING, deliveries=deliveries)
    agent.start()
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 1})
    history = History(str(tmp_path))

    def safety_notices():
        return [args for name, args in deliveries.sent
                if name == "deliver_apprise" and "cannot be restored" in args[2]]

    clock.advance(30)
    assert safety_notices() == []
    history.append(lost(clock.seconds(), 3))
    clock.advance(30)
    (notice,) = safety_notices()
    assert notice[1].startswith("flud on box: At risk") and "3 object(s)" in notice[2]
    clock.advance(30)
    assert len(safety_notices()) == 1            # not on every tick
    clock.advance(DAY)
    assert len(safety_notices()) == 2            # overdue_repeat later, still red
    history.append({"job": "check", "start": clock.seconds(), "end": clock.seconds() + 1,
                    "exit": 0, "summary": {"counts": {"healthy": 8}}})
    clock.advance(30)
    history.append(lost(clock.seconds(), 1))      # red again: news at once
    clock.advance(30)
    assert len(safety_notices()) == 3
    status = agent.status()
    assert status["notify"]["safety_notice"] is not None
    assert status["verdict"]["level"] == "alarm"


def test_the_page_shows_the_battery_pause_and_a_notifier_that_cannot_deliver(tmp_path):
    class Battery:
        power_plugged = False
    deliveries = Deliveries()
    deliveries.failing = True
    agent, clock, spawn = make(tmp_path, BASE + PING + '[power]\npause_on_battery = true\n',
                               deliveries=deliveries, battery=lambda: Battery())
    agent.start()
    clock.advance(3 * DAY + 600)   # overdue: a notice, every attempt refused
    for _ in range(10):
        clock.advance(10)          # the retries, 1, 2 and 4 s apart
    page = render(agent.status())
    assert 'id="power-pause"' in page and "on battery" in page
    assert "last delivery FAILED" in page and "refused" in page
    quiet, _, _ = make_plain(tmp_path / "quiet", BASE)   # agent.toml names no destination
    assert "no notifications: nobody is told" in render(quiet.status())
