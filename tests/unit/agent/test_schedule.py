"""The schedule: intervals, times of day, missed runs once, one job at a time."""
import datetime

from flud.agent.schedule import Scheduler, next_run

UTC = datetime.timezone.utc
HOUR = 3600.0


def at(day, hour, minute=0):
    return datetime.datetime(2026, 3, day, hour, minute, tzinfo=UTC).timestamp()


def test_an_interval_counts_from_the_last_start_and_a_new_job_runs_at_once():
    assert next_run(6 * HOUR, None, None, 1000.0) == 1000.0
    assert next_run(6 * HOUR, None, 1000.0, 1001.0) == 1000.0 + 6 * HOUR


def test_a_time_of_day_is_the_next_such_moment():
    assert next_run(None, (2, 30), None, at(1, 1), UTC) == at(1, 2, 30)
    assert next_run(None, (2, 30), None, at(1, 3), UTC) == at(2, 2, 30)
    assert next_run(None, (2, 30), at(1, 2, 30), at(1, 2, 31), UTC) == at(2, 2, 30)


def test_runs_missed_while_asleep_run_once_not_once_per_slot():
    s = Scheduler({"backup": (HOUR, None)}, tz=UTC)
    assert s.take(0.0) == "backup"
    s.finished("backup")
    # the machine sleeps ten hours: ten slots missed
    later = 10 * HOUR + 5
    assert s.take(later) == "backup"
    s.finished("backup")
    assert s.take(later + 1) is None
    assert s.next_runs(later + 1)["backup"] == later + HOUR


def test_a_daily_job_missed_for_days_runs_once():
    s = Scheduler({"verify": (None, (2, 0))}, {"verify": at(1, 2)}, tz=UTC)
    assert s.take(at(1, 23)) is None
    now = at(5, 9)   # three nights missed
    assert s.take(now) == "verify"
    s.finished("verify")
    assert s.take(now + 60) is None
    assert s.next_runs(now)["verify"] == at(6, 2)


def test_jobs_queue_one_at_a_time_the_longest_due_first():
    s = Scheduler({"backup": (HOUR, None), "verify": (HOUR, None)},
                  {"backup": 0.0, "verify": -1800.0})
    now = 2 * HOUR
    assert s.take(now) == "verify"        # due since 1800 s, backup since 3600 s
    assert s.take(now) is None            # verify is running
    s.finished("verify")
    assert s.take(now + 1) == "backup"


def test_a_postponed_job_keeps_its_old_start_and_waits_until_told():
    s = Scheduler({"backup": (HOUR, None)}, {"backup": 0.0})
    assert s.take(HOUR) == "backup"
    s.postpone("backup", HOUR + 60)       # the home was busy
    assert s.last_start["backup"] == 0.0
    assert s.take(HOUR + 30) is None
    assert s.take(HOUR + 60) == "backup"
    assert s.seconds_to_next(HOUR + 60) >= 0


def test_jobs_due_at_once_go_in_the_tables_order():
    s = Scheduler({"backup": (HOUR, None), "verify": (HOUR, None), "check": (HOUR, None)})
    order = []
    for _ in range(3):
        order.append(s.take(0.0))
        s.finished(order[-1])
    assert order == ["backup", "verify", "check"]
