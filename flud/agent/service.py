"""The agent: runs the scheduled jobs, one at a time, as child processes,
records each run, and keeps what the status page shows.

The clock is the reactor's (passed in). The timer wakes at the next due time
but at most every MAX_SLEEP seconds, so after the machine slept the agent
notices within that long; a run missed meanwhile runs once (the scheduler).
A job that finds the home busy (a `flud backup` by hand holds the lock) is
tried again BUSY_RETRY seconds later, not counted as its run.
"""
import logging
import sys

from twisted.internet import defer

from flud.agent import jobs as job_table
from flud.agent.runner import run_job
from flud.agent.schedule import Scheduler
from flud.agent.lifecycle import HookRefused, job_events, power_pause
from flud.agent.status import build_status

log = logging.getLogger("flud.agent")

MAX_SLEEP = 30.0
BUSY_RETRY = 60.0


class Agent:
    def __init__(self, reactor, home: str, config, history, spawn=run_job,
                 python: str = sys.executable, tz=None, events=None, battery=None):
        self.reactor = reactor
        self.home = home
        self.config = config
        self.history = history
        self.spawn = spawn          # (reactor, argv) -> Deferred[{exit, signal, summary, stderr}]
        self.python = python
        self.states = job_table.job_states(config)
        self.jobs = job_table.scheduled(config)
        self.scheduler = Scheduler(self.jobs, history.last_starts(), tz)
        self.running = None         # {job, start, pid}
        self.snapshots = []         # the newest `flud ls --json` list
        self._timer = None
        self._stopped = False
        self.idle = defer.Deferred()  # fires when stop() finds no job running
        # hooks and notifications around each run (flud/agent/lifecycle.py)
        self.events = events if events is not None else job_events(reactor, home, config)
        self.battery = battery      # () -> on battery? (None: psutil's answer)
        self.paused = None          # why no job starts now, or None

    def start(self) -> None:
        self._refresh_snapshots()
        self._tick()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self.running is None and not self.idle.called:
            self.idle.callback(None)

    def status(self) -> dict:
        now = self.reactor.seconds()
        return build_status(now, self.home, self.jobs, self.states,
                            self.scheduler.next_runs(now), self.history.read(),
                            self.snapshots, self.running)

    # ---- the loop ----------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        if self._stopped:
            return
        now = self.reactor.seconds()
        try:
            self.events.tick(now, self.history.read())   # the overdue notice
        except Exception:   # a notice that cannot be sent must not stop the loop
            log.exception("the overdue check failed")
        self.paused = power_pause(self.config, self.battery)
        name = None if self.paused else self.scheduler.take(now)
        if name is None:
            delay = MAX_SLEEP if self.paused else \
                min(MAX_SLEEP, self.scheduler.seconds_to_next(now))
            self._timer = self.reactor.callLater(max(delay, 0.5), self._tick)
            return
        self._run(name, now)

    @defer.inlineCallbacks
    def _run(self, name: str, start: float):
        try:
            yield self._run_and_record(name, start)
        except Exception:  # the agent outlives any one run's trouble
            log.exception("the %s run could not be recorded", name)
            self.running = None
            self.scheduler.finished(name)
        if self._stopped:
            if not self.idle.called:
                self.idle.callback(None)
            return
        self._tick()

    @defer.inlineCallbacks
    def _run_and_record(self, name: str, start: float):
        argv = job_table.command_line(name, self.config, self.home, self.python,
                                      moment=self.reactor.seconds(), tz=self.scheduler.tz)
        self.running = {"job": name, "start": start, "pid": None}
        refusal = yield self.events.before(name)
        log.info("starting %s: %s", name, " ".join(argv[1:]))
        try:
            if isinstance(refusal, dict):   # the home is busy: as if the job had said so
                result = refusal
            elif refusal:   # an essential before_ hook failed: the job does not run
                raise HookRefused(refusal)
            else:
                result = yield self.spawn(self.reactor, argv, started=self._started,
                                          timeout=self.config.job_timeout)
        except Exception as err:  # could not even start it
            result = {"exit": None, "signal": None, "summary": None, "stderr": str(err)}
        end = self.reactor.seconds()
        summary = result.get("summary")
        error = (summary or {}).get("error") if isinstance(summary, dict) else None
        if error and error.get("code") == "HOME_BUSY":
            log.warning("%s postponed: %s", name, error.get("message"))
            self.running = None
            self.scheduler.postpone(name, end + BUSY_RETRY)
        else:
            record = {"job": name, "start": start, "end": end, "exit": result.get("exit"),
                      "summary": summary}
            if summary is None:
                tail = (result.get("stderr") or "").strip().splitlines()
                why = f"signal {result['signal']}" if result.get("signal") else \
                    f"exit {result.get('exit')}"
                record["error"] = f"{why}, no summary" + (f": {tail[-1]}" if tail else "")
            if result.get("timed_out"):
                record["error"] = (f"stopped after running longer than [agent] job_timeout "
                                   f"({self.config.job_timeout:g} s)")
            if isinstance(refusal, str):
                record["error"] = refusal
            record = yield self.events.after(name, record, result.get("stderr") or "")
            if name == "backup":  # the page shows the new snapshot with the run
                yield self._refresh_snapshots()
            self.history.append(record)
            log.info("%s ended: exit %s", name, result.get("exit"))
            self.running = None
            self.scheduler.finished(name)

    def _started(self, pid) -> None:
        if self.running is not None:
            self.running["pid"] = pid

    @defer.inlineCallbacks
    def _refresh_snapshots(self):
        """The snapshot list, from `flud ls --json` (read-only: no job lock)."""
        argv = [self.python, "-m", "flud", "ls", "--home", self.home, "--json"]
        try:
            result = yield self.spawn(self.reactor, argv)
        except Exception as err:
            log.warning("could not list snapshots: %s", err)
            return
        summary = result.get("summary")
        if isinstance(summary, dict) and isinstance(summary.get("snapshots"), list):
            self.snapshots = summary["snapshots"]
