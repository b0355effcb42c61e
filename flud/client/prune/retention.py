"""Which snapshots a retention policy keeps, and why (`flud forget`): pure.

Given the snapshots (SnapshotInfo) and a Policy, decide() says for each one
whether it is kept and by which rules, with restic's meaning of each rule:

- keep-last N: the N newest snapshots.
- keep-hourly/daily/weekly/monthly/yearly N: the newest snapshot of each of
  the last N hours/days/weeks/months/years that have one, by local time
  (weeks are ISO weeks, Monday first). -1 means every such period.
- keep-within DURATION: every snapshot made within DURATION before the
  newest snapshot (not before now: a machine that stopped backing up keeps
  its last snapshots however old they are).
- keep-tag T: every snapshot with tag T; "a,b" means both tags; the rule
  may be given many times (any of them keeps).
- snapshot ids named to forget are removed, whatever the rules say; the
  rules decide for the rest (with no rule, the rest is kept).

The rules apply to each group of snapshots on its own: by default the
snapshots of one host and one set of source paths (restic's default), so a
laptop's dailies never push out a server's. A protected snapshot is never
removed: the rules keep it ("protected"), and naming one to forget is an
error, so nothing is forgotten by that command.

Nothing here reads a clock, the disk or the time zone: the time zone for
"local time" and the present moment (for the dry-run table's ages) are
given by the caller. Durations ("7d", "2w", "1y2mo3d", "36h") are parsed by
parse_duration, which says exactly what is wrong with one it refuses.
"""
import datetime
from typing import NamedTuple, Optional, Tuple

from flud import units
from flud.errors import FludError
from flud.units import Duration

# Periods of the bucket rules, newest first in their output order.
PERIOD_RULES = ("hourly", "daily", "weekly", "monthly", "yearly")
UNLIMITED = -1
DEFAULT_GROUP_BY = ("host", "paths")
GROUP_FIELDS = ("host", "paths", "tags")


class RetentionError(FludError):
    """A retention policy, a duration or a list of snapshots that cannot be applied."""

    code = "RETENTION"


class BadDuration(RetentionError, units.BadDuration):
    code = "BAD_DURATION"


class BadPolicy(RetentionError):
    code = "BAD_POLICY"


class ProtectedSnapshot(RetentionError):
    """A snapshot named to forget is protected."""

    code = "PROTECTED_SNAPSHOT"


class UnknownSnapshot(RetentionError):
    code = "NO_SUCH_SNAPSHOT"


def parse_duration(text: str) -> Duration:
    """A keep-within duration in flud's one grammar (flud/units.py): "7d",
    "2w", "1y2mo3d", "36h"; a bare number other than 0 and the ambiguous
    "m" are refused. BadDuration says what is wrong."""
    try:
        return units.parse_duration(text)
    except units.BadDuration as err:
        raise BadDuration(str(err)) from None


class SnapshotInfo(NamedTuple):
    """What a policy looks at: `id` as the user names it, `time` in unix
    seconds, its host, source paths and tags, and whether it is protected."""
    id: str
    time: float
    host: str
    paths: Tuple[str, ...]
    tags: Tuple[str, ...] = ()
    protected: bool = False


class Policy(NamedTuple):
    """0 (or an empty field) means the rule is not given; -1 (UNLIMITED) for
    a count keeps every period. tags: each entry one keep-tag (tags joined
    by "," must all be present). forget: ids to remove."""
    last: int = 0
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0
    within: Optional[Duration] = None
    tags: Tuple[str, ...] = ()
    forget: Tuple[str, ...] = ()
    group_by: Tuple[str, ...] = DEFAULT_GROUP_BY

    @property
    def has_rules(self) -> bool:
        return bool(self.last or any(getattr(self, p) for p in PERIOD_RULES)
                    or self.within is not None or self.tags)


class Decision(NamedTuple):
    """keep: whether the snapshot stays; reasons: the rules that keep it
    ("last", "daily", "within 7d", "tag x", "protected", "no rule given"),
    or why it goes ("named", or nothing: no rule keeps it)."""
    snapshot: SnapshotInfo
    keep: bool
    reasons: Tuple[str, ...]
    group: Tuple


def check_policy(policy: Policy) -> None:
    """BadPolicy for a count below -1, a zero or missing keep-within, an
    empty tag, or a grouping field flud does not know."""
    for rule in ("last",) + PERIOD_RULES:
        count = getattr(policy, rule)
        if type(count) is not int or count < UNLIMITED:
            raise BadPolicy(f"keep-{rule} {count!r}: a count is a whole number, or -1 for "
                            f"all")
    if policy.within is not None and policy.within.is_zero:
        raise BadPolicy("keep-within 0 keeps nothing: give a duration such as 7d")
    for tag in policy.tags:
        if not tag or any(not part for part in tag.split(",")):
            raise BadPolicy(f"keep-tag {tag!r}: an empty tag")
    for field in policy.group_by:
        if field not in GROUP_FIELDS:
            raise BadPolicy(f"cannot group snapshots by {field!r} "
                            f"(only by {', '.join(GROUP_FIELDS)})")


def decide(snapshots, policy: Policy, tz: datetime.tzinfo) -> list:
    """[Decision] for every snapshot, newest first within each group, the
    groups in order of their newest snapshot. tz: the zone whose days,
    weeks... the period rules count. Raises (and decides nothing) when a
    named id is unknown or protected, or the policy is not valid."""
    check_policy(policy)
    snapshots = list(snapshots)
    by_id = {}
    for snap in snapshots:
        by_id.setdefault(str(snap.id), []).append(snap)
    named = set()
    for wanted in policy.forget:
        found = by_id.get(str(wanted))
        if not found:
            raise UnknownSnapshot(f"no snapshot {wanted}: nothing was forgotten")
        protected = [s for s in found if s.protected]
        if protected:
            raise ProtectedSnapshot(f"snapshot {wanted} is protected: it cannot be forgotten "
                                    f"(remove its protection first); nothing was forgotten")
        named.add(str(wanted))
    if not policy.has_rules and not named:
        raise BadPolicy("no rule and no snapshot given: nothing would be forgotten "
                        "(give --keep-* rules or snapshot ids)")
    groups = {}
    for snap in snapshots:
        groups.setdefault(group_key(snap, policy.group_by), []).append(snap)
    ordered = []
    for key, members in groups.items():
        members.sort(key=lambda s: (s.time, str(s.id)), reverse=True)
        ordered.append((members[0].time, key, members))
    ordered.sort(key=lambda item: (item[0], str(item[1])), reverse=True)
    decisions = []
    for _, key, members in ordered:
        decisions.extend(_decide_group(key, members, policy, named, tz))
    return decisions


def group_key(snap: SnapshotInfo, group_by) -> tuple:
    key = []
    for field in group_by:
        value = getattr(snap, field)
        key.append(tuple(sorted(value)) if field in ("paths", "tags") else value)
    return tuple(key)


def _bucket(rule: str, moment: datetime.datetime):
    if rule == "hourly":
        return (moment.year, moment.month, moment.day, moment.hour)
    if rule == "daily":
        return (moment.year, moment.month, moment.day)
    if rule == "weekly":
        year, week, _ = moment.isocalendar()
        return (year, week)
    if rule == "monthly":
        return (moment.year, moment.month)
    return (moment.year,)


def _decide_group(key, members, policy: Policy, named: set, tz) -> list:
    """members: newest first."""
    reasons = {id(s): [] for s in members}
    rest = [s for s in members if str(s.id) not in named]
    left = {"last": policy.last}
    left.update((rule, getattr(policy, rule)) for rule in PERIOD_RULES)
    last_bucket = dict.fromkeys(PERIOD_RULES)
    cutoff = None
    if policy.within is not None and rest:
        newest = datetime.datetime.fromtimestamp(rest[0].time, tz)
        cutoff = policy.within.before(newest).timestamp()
    wanted_tags = [frozenset(t.split(",")) for t in policy.tags]
    for snap in rest:
        why = reasons[id(snap)]
        if left["last"]:
            why.append("last")
            left["last"] -= 1 if left["last"] > 0 else 0
        moment = datetime.datetime.fromtimestamp(snap.time, tz)
        for rule in PERIOD_RULES:
            bucket = _bucket(rule, moment)
            if left[rule] and bucket != last_bucket[rule]:
                why.append(rule)
                last_bucket[rule] = bucket
                left[rule] -= 1 if left[rule] > 0 else 0
        if cutoff is not None and snap.time > cutoff:
            why.append(f"within {policy.within}")
        for tags in wanted_tags:
            if tags <= set(snap.tags):
                why.append("tag " + ",".join(sorted(tags)))
        if snap.protected:
            why.append("protected")
        if not policy.has_rules and not why:
            why.append("no rule given")
    out = []
    for snap in members:
        if str(snap.id) in named:
            out.append(Decision(snap, False, ("named",), key))
        else:
            why = tuple(reasons[id(snap)])
            out.append(Decision(snap, bool(why), why, key))
    return out


def summary_counts(decisions) -> Tuple[int, int]:
    """(kept, removed)."""
    kept = sum(1 for d in decisions if d.keep)
    return kept, len(decisions) - kept


def render(decisions, group_by, now: float, tz: datetime.tzinfo, dry_run: bool = True) -> str:
    """The table `flud forget --dry-run` prints: per group, one row per
    snapshot (id, local time, age, host, paths, and which rules keep it or
    that it is removed), then the counts."""
    header = ("ID", "Time", "Age", "Host", "Paths", "Decision")
    lines, group, rows = [], None, []

    def flush():
        if not rows:
            return
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header) - 1)]
        for row in [header] + rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]
            lines.append("  ".join(cells).rstrip())
        rows.clear()

    for decision in decisions:
        if decision.group != group:
            flush()
            group = decision.group
            if group_by:
                if lines:
                    lines.append("")
                lines.append("snapshots of " + ", ".join(
                    f"{field} {_show(value)}" for field, value in zip(group_by, group)))
        snap = decision.snapshot
        moment = datetime.datetime.fromtimestamp(snap.time, tz)
        verdict = ("keep: " + ", ".join(decision.reasons) if decision.keep
                   else "remove" + (" (named)" if decision.reasons == ("named",) else ""))
        rows.append((str(snap.id), moment.strftime("%Y-%m-%d %H:%M:%S"), age(now - snap.time),
                     snap.host, _show(snap.paths), verdict))
    flush()
    kept, removed = summary_counts(decisions)
    tail = " (dry run: nothing was forgotten)" if dry_run else ""
    lines.append(f"keep {kept} snapshot{'s' * (kept != 1)}, "
                 f"remove {removed} snapshot{'s' * (removed != 1)}{tail}")
    return "\n".join(lines) + "\n"


def _show(value) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) if value else "-"
    return str(value) if value != "" else "-"


def age(seconds: float) -> str:
    """"3d 4h", "2h 5m", "40s"; "in the future" for a negative age (a
    snapshot from a machine whose clock is ahead)."""
    if seconds < 0:
        return "in the future"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"
