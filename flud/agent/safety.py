"""Is the data safe? One verdict from the agent's state, by explicit rules:
pure (the time is passed in), shared by the status page's headline and by
anything that warns a person (notifications read the same Verdict).

The rules, each a Reason with a stable code (level in brackets):

  NOTHING_BACKED_UP   [red]    no backup has succeeded yet
  BACKUP_OVERDUE      [amber]  the last successful backup is older than
                               rules.overdue_warn (default: twice the backup
                               interval, at least a day)
                      [red]    ... older than rules.overdue_alarm (3 days)
  BACKUP_FAILED       [amber]  the newest backup run failed (an older one
                               succeeded: what it stored is still there)
  OBJECTS_LOST        [red]    the last check found objects lost or
                               unavailable (fewer than k shares reachable)
  OBJECTS_AT_RISK     [amber]  ... objects at risk (close to k shares)
  OBJECTS_DEGRADED    [amber]  ... objects below full redundancy
  CHECK_STALE         [amber]  no check for rules.check_stale (7 days) while
                               there is data: redundancy is not known
  SHARES_MISSING      [amber]  the last verify found shares missing or corrupt
  LEASE_ENDING        [amber]  the nodes keep the data for less than
                               rules.lease_warn (90 days) more
                      [red]    ... less than rules.lease_alarm (30 days)
  PAUSED              [info]   backups are paused until a time

The level is the worst reason's; none (or only info): "ok". The headline is
one line a person reads first; `facts` carries what it says as data.
"""
import dataclasses
import time
from typing import Optional

OK, WARN, ALARM, INFO = "ok", "warn", "alarm", "info"
_RANK = {INFO: 0, OK: 0, WARN: 1, ALARM: 2}
DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class Rules:
    overdue_warn: Optional[float] = None   # None: 2 x the backup interval, at least a day
    overdue_alarm: float = 3 * DAY
    check_stale: float = 7 * DAY
    lease_warn: float = 90 * DAY
    lease_alarm: float = 30 * DAY


@dataclasses.dataclass(frozen=True)
class SafetyState:
    """What the verdict is made of (status.safety_state builds it from the
    history)."""
    now: float
    backup_every: Optional[float]        # the backup's interval in seconds, or None
    last_success: Optional[float]        # end of the newest successful backup
    last_failure: Optional[dict]         # {at, message} when the newest backup run failed
    objects: Optional[dict]              # the last check's counts, or None (no check)
    checked_at: Optional[float]
    verify_bad: int = 0                  # shares the last verify found missing or corrupt
    kept_until: Optional[float] = None   # the nodes' lease
    paused_until: Optional[float] = None


class Reason:
    __slots__ = ("level", "code", "text")

    def __init__(self, level, code, text):
        self.level, self.code, self.text = level, code, text

    def as_dict(self) -> dict:
        return {"level": self.level, "code": self.code, "text": self.text}

    def __repr__(self):
        return f"Reason({self.level!r}, {self.code!r}, {self.text!r})"


@dataclasses.dataclass(frozen=True)
class Verdict:
    level: str          # "ok", "warn" or "alarm"
    headline: str       # one line: safe, and why; or the worst reason
    details: str        # when not safe: last backup, redundancy, lease date ("" when safe)
    reasons: tuple      # of Reason, worst first
    facts: dict

    def as_dict(self) -> dict:
        return {"level": self.level, "headline": self.headline, "details": self.details,
                "reasons": [r.as_dict() for r in self.reasons], "facts": self.facts}


def ago(seconds: float) -> str:
    """'3 min', '5 h', '2 days' (rounded down)."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return "just now" if seconds < 60 else "1 min ago"
    for unit, size in (("day", DAY), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            n = int(seconds // size)
            word = f"{n} {unit}" + ("s" if unit == "day" and n != 1 else "")
            return word + " ago"
    return "just now"


def day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t))


def safety_verdict(state: SafetyState, rules: Rules = Rules()) -> Verdict:
    reasons = []
    add = lambda level, code, text: reasons.append(Reason(level, code, text))  # noqa: E731
    now = state.now
    warn_after = rules.overdue_warn
    if warn_after is None:
        warn_after = max(DAY, 2 * (state.backup_every or DAY))
    warn_after = min(warn_after, rules.overdue_alarm)
    if state.last_success is None:
        add(ALARM, "NOTHING_BACKED_UP", "nothing is backed up yet")
    else:
        age = now - state.last_success
        if age > rules.overdue_alarm:
            add(ALARM, "BACKUP_OVERDUE", f"no successful backup for {ago(age)[:-4]}")
        elif age > warn_after:
            add(WARN, "BACKUP_OVERDUE", f"no successful backup for {ago(age)[:-4]}")
    if state.last_failure is not None:
        add(WARN, "BACKUP_FAILED", f"the last backup failed: {state.last_failure['message']}")
    objects = state.objects
    if objects is not None:
        gone = objects.get("lost", 0) + objects.get("unavailable", 0)
        if gone:
            add(ALARM, "OBJECTS_LOST", f"{gone} object(s) cannot be restored now "
                                       f"(lost or unavailable)")
        if objects.get("at_risk", 0):
            add(WARN, "OBJECTS_AT_RISK", f"{objects['at_risk']} object(s) close to losing "
                                         f"too many shares")
        if objects.get("degraded", 0):
            add(WARN, "OBJECTS_DEGRADED", f"{objects['degraded']} object(s) below full "
                                          f"redundancy")
    if state.last_success is not None and (
            state.checked_at is None or now - state.checked_at > rules.check_stale):
        if state.checked_at is not None:
            add(WARN, "CHECK_STALE", f"redundancy last checked {ago(now - state.checked_at)}")
    if state.verify_bad:
        add(WARN, "SHARES_MISSING", f"the last verify found {state.verify_bad} share(s) "
                                    f"missing or corrupt")
    if state.kept_until is not None:
        left = state.kept_until - now
        if left < rules.lease_alarm:
            add(ALARM, "LEASE_ENDING", f"the nodes keep the data only until "
                                       f"{day(state.kept_until)}")
        elif left < rules.lease_warn:
            add(WARN, "LEASE_ENDING", f"the nodes keep the data only until "
                                      f"{day(state.kept_until)}")
    if state.paused_until is not None and state.paused_until > now:
        add(INFO, "PAUSED", f"backups paused until "
                            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(state.paused_until))}")
    reasons.sort(key=lambda r: -_RANK[r.level])
    level = max((r.level for r in reasons), key=_RANK.get, default=OK)
    level = OK if level == INFO else level
    facts = {"last_success": state.last_success, "checked_at": state.checked_at,
             "objects": objects, "kept_until": state.kept_until,
             "paused_until": state.paused_until}
    headline, details = _headline(level, state, reasons)
    return Verdict(level, headline, details, tuple(reasons), facts)


def _headline(level, state, reasons) -> tuple:
    """(headline, details)."""
    now = state.now
    parts = []
    if state.last_success is not None:
        parts.append(f"last backup {ago(now - state.last_success)}")
    objects = state.objects
    if objects is not None:
        total = sum(objects.get(k, 0) for k in
                    ("healthy", "degraded", "at_risk", "unavailable", "lost"))
        if objects.get("healthy", 0) == total:
            parts.append(f"all {total} objects at full redundancy")
        else:
            parts.append(f"{objects.get('healthy', 0)} of {total} objects at full redundancy")
    elif state.last_success is not None:
        parts.append("redundancy not checked yet")
    if state.kept_until is not None:
        parts.append(f"nodes keep the data until {day(state.kept_until)}")
    tail = "; ".join(parts)
    if level == OK:
        return (f"Your data is safe: {tail}" if tail else "Your data is safe"), ""
    word = "At risk" if level == ALARM else "Needs attention"
    return f"{word}: {reasons[0].text}", tail
