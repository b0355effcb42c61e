"""What the agent tells a person, and when: pure (times are passed in).

Two kinds of destination, both set in agent.toml's [notify]:

- `urls`: apprise URLs (ntfy, e-mail, Matrix, Slack, ...), sent the events
  named in `events` (start, success, failure, overdue) of the jobs in `jobs`;
- `ping_url`: a healthchecks-style dead-man's switch for the backup job:
  URL/start when a backup starts, URL when it succeeds, URL/fail (with the
  error and the tail of the log as the body) when it fails. The service
  raises its own alarm when the pings stop, which covers an agent that is
  not running at all.

The overdue rule ("no successful backup for N days") is the one the status
page colours its headline by: `overdue_after` is the verdict's red threshold
(flud/agent/config.py builds the page's Rules from it), and both count a run
as a success by `succeeded` below. The page's other red reasons (objects
lost, the lease ending) go out as "safety" notices when they first appear.
Each notice is repeated every `overdue_repeat` while it lasts, never on
every tick.
"""
import dataclasses

EVENTS = ("start", "success", "failure", "overdue", "safety")
JOBS = ("backup", "verify", "check", "forget")
DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class NotifyConfig:
    urls: tuple = ()                  # apprise URLs
    ping_url: str = ""                # healthchecks-style base URL ("" : none)
    events: frozenset = frozenset({"failure", "overdue", "safety"})
    jobs: frozenset = frozenset(JOBS)
    overdue_after: float = 3 * DAY    # no successful backup for this long: notify
    overdue_repeat: float = DAY       # and again this often while it lasts
    log_lines: int = 20               # lines of the job's log with a failure
    timeout: float = 10.0             # seconds per delivery attempt
    retries: int = 3                  # attempts after the first

    @property
    def any(self) -> bool:
        return bool(self.urls or self.ping_url)


@dataclasses.dataclass(frozen=True)
class Message:
    """One notification: `kind` is an event name; `ping` the ping suffix
    ("/start", "", "/fail") when it goes to the ping URL, else None."""
    kind: str
    title: str
    body: str
    ping: str = None


EXIT_SKIPPED = 1   # flud/cli/exits.py: done, but something was left out


def succeeded(record: dict) -> bool:
    """A run that did its job: exit 0 and no error noted, or a backup that
    made its snapshot but skipped some files (exit 1: a socket in the home,
    a file that vanished), which must not raise the alarm every run. For
    verify and check, exit 1 means shares missing or at risk: a failure."""
    if record.get("error"):
        return False
    if record.get("exit") == 0:
        return True
    summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
    return (record.get("job") == "backup" and record.get("exit") == EXIT_SKIPPED
            and summary.get("snapshot") is not None)


def last_success(records, job: str = "backup"):
    """When the newest successful run of `job` ended, or None."""
    ends = [r.get("end") for r in records if r.get("job") == job and succeeded(r)
            and isinstance(r.get("end"), (int, float))]
    return max(ends) if ends else None


def backup_overdue(now: float, last_ok, since: float, after: float) -> bool:
    """No successful backup for `after` seconds: counted from the last one,
    or from `since` (the agent's start) when there never was one."""
    return now - (last_ok if last_ok is not None else since) >= after


def overdue_due(now: float, last_ok, since: float, last_notice, config: NotifyConfig) -> bool:
    """Whether to send the overdue notice now: overdue, and no notice yet
    since the last success, or the last one `overdue_repeat` ago."""
    if not backup_overdue(now, last_ok, since, config.overdue_after):
        return False
    if last_notice is None or (last_ok is not None and last_notice < last_ok):
        return True
    return now - last_notice >= config.overdue_repeat


def overdue_message(now: float, last_ok, since: float, host: str) -> Message:
    days = (now - (last_ok if last_ok is not None else since)) / DAY
    what = "since the agent started" if last_ok is None else "since the last one"
    title = f"flud on {host}: no successful backup for {days:.1f} days"
    body = (f"No backup has succeeded for {days:.1f} days ({what}). Check that the agent "
            f"runs, that this machine reaches the network, and the last runs' errors "
            f"on the status page.")
    return Message("overdue", title, body)


# The overdue notice has rules of its own (above); every other red reason of
# the status page's verdict (flud/agent/safety.py) is a "safety" notice.
OVERDUE_CODES = frozenset({"NOTHING_BACKED_UP", "BACKUP_OVERDUE"})


def safety_alarms(verdict) -> tuple:
    """The codes of the verdict's red reasons that the overdue notice does
    not already cover (objects lost, the lease ending), sorted."""
    return tuple(sorted({r.code for r in verdict.reasons
                         if r.level == "alarm" and r.code not in OVERDUE_CODES}))


def safety_due(now: float, alarms: tuple, last_codes, last_notice,
               config: NotifyConfig) -> bool:
    """A safety notice now: a red reason no notice named yet, or the same
    ones still red `overdue_repeat` after the last notice."""
    if not alarms:
        return False
    if set(alarms) - set(last_codes or ()) or last_notice is None:
        return True
    return now - last_notice >= config.overdue_repeat


def safety_message(verdict, host: str) -> Message:
    lines = [f"- {r.text}" for r in verdict.reasons if r.level == "alarm"]
    body = "\n".join([verdict.headline, *lines])
    if verdict.details:
        body += f"\n\n{verdict.details}"
    return Message("safety", f"flud on {host}: {verdict.headline}", body)


def start_message(job: str, host: str) -> Message:
    return Message("start", f"flud on {host}: {job} started", f"{job} started",
                   "/start" if job == "backup" else None)


def end_message(job: str, record: dict, log_tail: str, host: str) -> Message:
    """success or failure of one run; a failure carries the error and the
    tail of the job's log."""
    if succeeded(record):
        summary = record.get("summary") or {}
        snapshot = summary.get("snapshot")
        detail = f"snapshot {snapshot}" if snapshot is not None else "done"
        how = "succeeded"
        if record.get("exit") == EXIT_SKIPPED:
            how = "succeeded with warnings"
            detail += f", {summary.get('skipped', 'some')} path(s) skipped"
            if log_tail.strip():
                detail += "\n\nlast lines of its log:\n" + log_tail.rstrip()
        return Message("success", f"flud on {host}: {job} {how}", f"{job}: {detail}",
                       "" if job == "backup" else None)
    error = record.get("error") or _summary_error(record) or f"exit {record.get('exit')}"
    body = f"{job} failed: {error}"
    if log_tail.strip():
        body += "\n\nlast lines of its log:\n" + log_tail.rstrip()
    return Message("failure", f"flud on {host}: {job} FAILED", body,
                   "/fail" if job == "backup" else None)


def _summary_error(record: dict):
    summary = record.get("summary")
    if isinstance(summary, dict) and isinstance(summary.get("error"), dict):
        error = summary["error"]
        return f"{error.get('code')}: {error.get('message')}"
    return None


def tail_lines(text: str, count: int) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-count:]) if count > 0 else ""
