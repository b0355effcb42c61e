"""When each job runs next: pure, the time is always passed in.

A job runs every interval ("6h": counted from its last start) or at a time
of day ("02:30"). A run missed while the machine slept or the agent was
down is due once, not once per missed slot: the next run is computed from
the last start only, so any number of missed slots collapse into one.
Jobs never overlap: the queue hands out one job at a time, the one due
longest first (on a tie, the first in the job table: a backup before the
checks of what it stored), and the next only once the running one has
finished.
"""
import datetime


def next_run(every, at, last_start, now: float, tz=None) -> float:
    """The time a job is next due. every: seconds or None; at: (hour,
    minute) or None; last_start: when it last started, or None (never).
    tz: the time zone of `at` (None: the machine's local time)."""
    if every is not None:
        return now if last_start is None else last_start + every
    hour, minute = at
    after = now if last_start is None else last_start
    moment = datetime.datetime.fromtimestamp(after, tz)
    slot = moment.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if slot.timestamp() <= after:
        slot = _next_day(slot, hour, minute)
    return slot.timestamp()


def _next_day(slot, hour, minute):
    # the calendar day after, at the same wall-clock time (DST moves the gap)
    day = (slot + datetime.timedelta(days=1)).date()
    return datetime.datetime.combine(day, datetime.time(hour, minute), slot.tzinfo)


class Scheduler:
    """The jobs' schedules and their last starts; hands out due jobs one at
    a time."""

    def __init__(self, jobs: dict, last_starts: dict = None, tz=None):
        """jobs: name -> (every, at); last_starts: name -> time (from history)."""
        self.jobs = dict(jobs)
        self.last_start = {name: (last_starts or {}).get(name) for name in self.jobs}
        self.tz = tz
        self.running = None   # the name of the job running now
        self.postponed = {}   # name -> time before which it is not tried again
        self._before = None   # the running job's previous start (for postpone)
        self.requested = []   # jobs asked for now (the page's buttons), in order
        self.paused_until = None  # no scheduled run starts before this (asked ones do)

    def next_runs(self, now: float) -> dict:
        """name -> when it is next due."""
        out = {}
        for name, (every, at) in self.jobs.items():
            due = next_run(every, at, self.last_start[name], now, self.tz)
            due = max(due, self.postponed.get(name, due))
            if self.paused_until is not None and self.paused_until > now:
                due = max(due, self.paused_until)
            out[name] = due
        return out

    def request(self, name: str) -> None:
        """Run `name` as soon as nothing runs, paused or not (once, however
        often it is asked for before it starts)."""
        if name not in self.requested:
            self.requested.append(name)

    def pause(self, until) -> None:
        """No scheduled run starts before `until` (None: resume now)."""
        self.paused_until = until

    def take(self, now: float):
        """The job to start now (marked running and started), or None while
        one runs or none is due. The one due longest ago goes first."""
        if self.running is not None:
            return None
        if self.requested:
            name = self.requested.pop(0)
            self.running = name
            self._before = self.last_start.get(name)
            if name in self.jobs:
                self.last_start[name] = now
            self.postponed.pop(name, None)
            return name
        order = {name: i for i, name in enumerate(self.jobs)}  # ties: the table's order
        due = [(when, order[name], name) for name, when in self.next_runs(now).items()
               if when <= now]
        if not due:
            return None
        _, _, name = min(due)
        self.running = name
        self._before = self.last_start[name]
        self.last_start[name] = now
        self.postponed.pop(name, None)
        return name

    def finished(self, name: str) -> None:
        if self.running == name:
            self.running = None

    def postpone(self, name: str, until: float) -> None:
        """The job could not run (the home was busy): try it again at `until`
        without counting this as its run."""
        if self.running == name and name in self.jobs:
            self.last_start[name] = self._before
        self.finished(name)
        self.postponed[name] = until

    def seconds_to_next(self, now: float) -> float:
        """How long until something may be due (for the agent's timer)."""
        if self.requested:
            return 0.0
        if not self.jobs:
            return 3600.0
        return max(0.0, min(self.next_runs(now).values()) - now)
