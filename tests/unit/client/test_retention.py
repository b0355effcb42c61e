"""flud/client/prune/retention.py: restic's meaning of every keep rule, by local
time, per group; named and protected snapshots; durations; the dry-run table."""
import datetime

import pytest

from flud import units
from flud.client.prune.retention import (UNLIMITED, BadDuration, BadPolicy, Duration, Policy,
                                   ProtectedSnapshot, SnapshotInfo, UnknownSnapshot, age,
                                   check_policy, decide, parse_duration, render)

UTC = datetime.timezone.utc
PLUS2 = datetime.timezone(datetime.timedelta(hours=2))
HOUR, DAY = 3600, 86400


def at(*fields, tz=UTC) -> float:
    return datetime.datetime(*fields, tzinfo=tz).timestamp()


def snap(sid, time, host="laptop", paths=("/home/me",), tags=(), protected=False):
    return SnapshotInfo(str(sid), time, host, tuple(paths), tuple(tags), protected)


def kept(decisions) -> list:
    return [d.snapshot.id for d in decisions if d.keep]


def reasons(decisions) -> dict:
    return {d.snapshot.id: d.reasons for d in decisions}


# --- durations

@pytest.mark.parametrize("text, duration", [
    ("7d", Duration(days=7)), ("2w", Duration(weeks=2)), ("36h", Duration(hours=36)),
    ("1y2mo3d", Duration(years=1, months=2, days=3)), (" 12h ", Duration(hours=12)),
    ("1y2mo1w3d4h", Duration(1, 2, 1, 3, 4)), ("0", Duration()), ("0d", Duration()),
    ("1 year 2 months", Duration(years=1, months=2)), ("1.5d", Duration(days=1.5)),
    ("7 d", Duration(days=7)), ("2h30min", Duration(hours=2, minutes=30)),
])
def test_durations_parse(text, duration):
    assert parse_duration(text) == duration
    if not duration.is_zero:
        assert parse_duration(str(duration)) == duration


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("  ", "empty"), ("7", "7 has no unit"), ("7x", "unknown unit 'x'"),
    ("d", "'d' is not a number"), ("3d2d", "days given twice"),
    ("3d1y", "largest to the smallest"), ("-1d", "'-' is not a number"),
    ("100001d", "too long"), ("30m", "'m' is ambiguous: write '30min' for minutes or '30mo'"),
    ("1y2m", "ambiguous"), ("1.5mo", "whole numbers"),
])
def test_bad_durations_say_what_is_wrong(text, words):
    with pytest.raises(BadDuration, match=words):
        parse_duration(text)


def test_a_duration_has_seconds_only_without_years_or_months():
    assert parse_duration("1w2d3h").seconds() == (9 * 24 + 3) * HOUR
    assert parse_duration("0").seconds() == 0
    with pytest.raises(units.BadDuration, match="no fixed length"):
        parse_duration("1mo").seconds()


def test_months_back_stay_in_the_month_and_hours_are_real_hours():
    moment = datetime.datetime(2024, 3, 31, 10, tzinfo=UTC)
    assert Duration(months=1).before(moment) == datetime.datetime(2024, 2, 29, 10, tzinfo=UTC)
    assert Duration(years=1, months=1).before(moment) == \
        datetime.datetime(2023, 2, 28, 10, tzinfo=UTC)
    assert Duration(weeks=1, days=1, hours=36).before(moment) == \
        datetime.datetime(2024, 3, 21, 22, tzinfo=UTC)


def test_days_back_across_a_daylight_saving_change_are_calendar_days():
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        paris = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database")
    moment = datetime.datetime(2026, 3, 29, 12, tzinfo=paris)  # the clocks went forward at 2:00
    day_before = Duration(days=1).before(moment)
    assert (day_before.day, day_before.hour) == (28, 12)
    assert moment.timestamp() - day_before.timestamp() == 23 * HOUR
    hours_before = Duration(hours=24).before(moment)
    assert (hours_before.day, hours_before.hour) == (28, 11)


# --- the rules

def test_keep_last_keeps_the_newest_and_minus_one_keeps_all():
    snaps = [snap(i, at(2026, 1, 1) + i * HOUR) for i in range(6)]
    assert kept(decide(snaps, Policy(last=2), UTC)) == ["5", "4"]
    assert len(kept(decide(snaps, Policy(last=UNLIMITED), UTC))) == 6
    assert reasons(decide(snaps, Policy(last=2), UTC))["4"] == ("last",)


def test_daily_keeps_the_newest_of_each_of_the_last_days_that_have_one():
    snaps = [snap("d1-morning", at(2026, 1, 1, 8)), snap("d1-evening", at(2026, 1, 1, 20)),
             snap("d3", at(2026, 1, 3, 9)), snap("d7-a", at(2026, 1, 7, 9)),
             snap("d7-b", at(2026, 1, 7, 10))]
    # days 7 and 3: the empty days between do not count
    assert kept(decide(snaps, Policy(daily=2), UTC)) == ["d7-b", "d3"]
    assert kept(decide(snaps, Policy(daily=UNLIMITED), UTC)) == ["d7-b", "d3", "d1-evening"]


def test_periods_are_counted_in_local_time():
    late = snap("late", at(2026, 1, 1, 23, 30))    # 01:30 on the 2nd at UTC+2
    early = snap("early", at(2026, 1, 2, 0, 30))
    assert kept(decide([late, early], Policy(daily=2), UTC)) == ["early", "late"]
    assert kept(decide([late, early], Policy(daily=2), PLUS2)) == ["early"]  # one local day
    assert kept(decide([late, early], Policy(hourly=5), UTC)) == ["early", "late"]


def test_weeks_are_iso_weeks_and_months_and_years_calendar_ones():
    sunday, monday = snap("sun", at(2026, 11, 22, 12)), snap("mon", at(2026, 11, 23, 12))
    assert kept(decide([sunday, monday], Policy(weekly=2), UTC)) == ["mon", "sun"]
    saturday = snap("sat", at(2026, 11, 21, 12))
    assert kept(decide([saturday, sunday], Policy(weekly=2), UTC)) == ["sun"]
    snaps = [snap("jan31", at(2026, 1, 31)), snap("feb1", at(2026, 2, 1)),
             snap("feb20", at(2026, 2, 20)), snap("dec31", at(2025, 12, 31))]
    assert kept(decide(snaps, Policy(monthly=2), UTC)) == ["feb20", "jan31"]
    assert kept(decide(snaps, Policy(yearly=5), UTC)) == ["feb20", "dec31"]


def test_rules_add_up_and_each_says_so():
    snaps = [snap(f"{day:02d}", at(2026, 11, day, 12)) for day in range(1, 25)]
    decisions = decide(snaps, Policy(last=1, daily=7, weekly=4), UTC)
    why = reasons(decisions)
    assert why["24"] == ("last", "daily", "weekly")   # Tuesday 24 November 2026
    assert why["22"] == ("daily", "weekly")           # Sunday: the newest of its ISO week
    assert why["18"] == ("daily",)
    assert why["15"] == why["08"] == ("weekly",)      # the third and fourth weeks
    assert why["01"] == ()
    assert kept(decisions) == ["24", "23", "22", "21", "20", "19", "18", "15", "08"]
    assert not next(d for d in decisions if d.snapshot.id == "14").keep


def test_keep_within_counts_back_from_the_newest_snapshot_not_from_now():
    snaps = [snap("a", at(2020, 5, 10, 12)), snap("b", at(2020, 5, 9, 13)),
             snap("c", at(2020, 5, 9, 12)), snap("d", at(2020, 5, 1))]
    decisions = decide(snaps, Policy(within=parse_duration("1d")), UTC)
    assert kept(decisions) == ["a", "b"]  # "c" is exactly a day older: not within
    assert reasons(decisions)["a"] == ("within 1d",)


def test_keep_tag_one_tag_all_of_a_list_any_of_many():
    snaps = [snap("x", 1, tags=["x"]), snap("xy", 2, tags=["x", "y"]), snap("y", 3, tags=["y"]),
             snap("none", 4)]
    assert kept(decide(snaps, Policy(tags=("x",)), UTC)) == ["xy", "x"]
    assert kept(decide(snaps, Policy(tags=("x,y",)), UTC)) == ["xy"]
    decisions = decide(snaps, Policy(tags=("x,y", "y")), UTC)
    assert kept(decisions) == ["y", "xy"]
    assert reasons(decisions)["xy"] == ("tag x,y", "tag y")


def test_named_snapshots_go_whatever_the_rules_and_the_rest_follow_the_rules():
    snaps = [snap(i, at(2026, 1, 1 + i)) for i in range(5)]
    decisions = decide(snaps, Policy(last=3, forget=("4",)), UTC)
    assert kept(decisions) == ["3", "2", "1"]   # the rules count the others
    assert reasons(decisions)["4"] == ("named",)
    # named only, no rule: just those go
    decisions = decide(snaps, Policy(forget=("0", "2")), UTC)
    assert kept(decisions) == ["4", "3", "1"]
    assert reasons(decisions)["3"] == ("no rule given",)


def test_a_protected_snapshot_is_never_removed_and_naming_one_is_an_error():
    snaps = [snap("new", at(2026, 1, 2)), snap("old", at(2020, 1, 1), protected=True)]
    decisions = decide(snaps, Policy(last=1), UTC)
    assert kept(decisions) == ["new", "old"]
    assert reasons(decisions)["old"] == ("protected",)
    with pytest.raises(ProtectedSnapshot, match="old is protected"):
        decide(snaps, Policy(forget=("new", "old")), UTC)


def test_an_unknown_id_and_an_empty_policy_are_errors():
    snaps = [snap("1", 1)]
    with pytest.raises(UnknownSnapshot, match="no snapshot 9"):
        decide(snaps, Policy(last=1, forget=("9",)), UTC)
    with pytest.raises(BadPolicy, match="nothing would be forgotten"):
        decide(snaps, Policy(), UTC)
    assert decide([], Policy(last=1), UTC) == []


@pytest.mark.parametrize("policy, words", [
    (Policy(last=-2), "keep-last -2"), (Policy(daily=1.5), "keep-daily 1.5"),
    (Policy(within=Duration()), "keep-within 0"), (Policy(tags=("",)), "empty tag"),
    (Policy(tags=("a,",)), "empty tag"), (Policy(last=1, group_by=("user",)), "'user'"),
])
def test_bad_policies_are_refused(policy, words):
    with pytest.raises(BadPolicy, match=words):
        check_policy(policy)


def test_each_host_and_set_of_paths_is_its_own_group():
    snaps = [snap("l1", at(2026, 1, 3), host="laptop"), snap("l2", at(2026, 1, 2), host="laptop"),
             snap("s1", at(2026, 1, 1), host="server"),
             snap("p1", at(2026, 1, 4), host="laptop", paths=("/etc",))]
    decisions = decide(snaps, Policy(last=1), UTC)
    assert kept(decisions) == ["p1", "l1", "s1"]
    assert [d.group for d in decisions] == [("laptop", ("/etc",)), ("laptop", ("/home/me",)),
                                            ("laptop", ("/home/me",)), ("server", ("/home/me",))]
    assert kept(decide(snaps, Policy(last=1, group_by=()), UTC)) == ["p1"]
    assert kept(decide(snaps, Policy(last=1, group_by=("host",)), UTC)) == ["p1", "s1"]


def test_every_snapshot_is_decided_once():
    snaps = [snap(i, at(2026, 1, 1) + i * 7 * HOUR, host=("a", "b")[i % 2]) for i in range(50)]
    decisions = decide(snaps, Policy(last=2, daily=3, weekly=2, tags=("t",)), UTC)
    assert sorted(d.snapshot.id for d in decisions) == sorted(s.id for s in snaps)


# --- the dry-run table

def test_the_dry_run_table():
    now = at(2026, 11, 24, 14)
    snaps = [snap("12", at(2026, 11, 24, 12), tags=["daily"]),
             snap("11", at(2026, 11, 20, 9)), snap("10", at(2026, 11, 19, 9)),
             snap("3", at(2026, 11, 24, 13), host="server", paths=["/srv", "/etc"])]
    policy = Policy(last=1, daily=2, forget=("10",))
    text = render(decide(snaps, policy, UTC), policy.group_by, now, UTC)
    assert text == (
        "snapshots of host server, paths /etc, /srv\n"
        "ID  Time                 Age    Host    Paths       Decision\n"
        "3   2026-11-24 13:00:00  1h 0m  server  /srv, /etc  keep: last, daily\n"
        "\n"
        "snapshots of host laptop, paths /home/me\n"
        "ID  Time                 Age    Host    Paths     Decision\n"
        "12  2026-11-24 12:00:00  2h 0m  laptop  /home/me  keep: last, daily\n"
        "11  2026-11-20 09:00:00  4d 5h  laptop  /home/me  keep: daily\n"
        "10  2026-11-19 09:00:00  5d 5h  laptop  /home/me  remove (named)\n"
        "keep 3 snapshots, remove 1 snapshot (dry run: nothing was forgotten)\n")
    # local time in the table too
    assert "2026-11-24 14:00:00" in render(decide(snaps, policy, PLUS2), (), now, PLUS2)


def test_ages_read_simply():
    assert [age(s) for s in (5, 125, 3 * HOUR + 60, 2 * DAY + 3 * HOUR, -1)] == \
        ["5s", "2m", "3h 1m", "2d 3h", "in the future"]
