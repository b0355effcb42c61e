"""The agent: runs the scheduled jobs, one at a time, as child processes,
records each run, and keeps what the status page shows.

The clock is the reactor's (passed in). The timer wakes at the next due time
but at most every MAX_SLEEP seconds, so after the machine slept the agent
notices within that long; a run missed meanwhile runs once (the scheduler).
A job that finds the home busy (a `flud backup` by hand holds the lock) is
tried again BUSY_RETRY seconds later, not counted as its run.
"""
import json
import logging
import os
import sys

from twisted.internet import defer

from flud.agent import jobs as job_table
from flud.agent.runner import run_job
from flud.agent.schedule import Scheduler
from flud.agent.lifecycle import HookRefused, job_events, power_pause
from flud.agent.status import build_status, verdict_of

log = logging.getLogger("flud.agent")

MAX_SLEEP = 30.0
BUSY_RETRY = 60.0
BROWSE_CACHE = 64   # directory listings kept by the page's browser
PAUSE_NAME = "agent-pause.json"   # {"until": time}: a pause outlives a restart
ASKABLE = ("backup", "verify", "check")   # the jobs the page can start now


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
        self.tz = tz
        self.scheduler = Scheduler(self.jobs, history.last_starts(), tz)
        self.scheduler.pause(self._read_pause())
        self._listings = {}         # (snapshot, path) -> a directory's listing
        self.adhoc = {}             # job name -> the flud arguments of a run asked for once
        self._asked = set()         # jobs asked for on the page, not yet started
        self.running = None         # {job, start, pid, progress}
        self.snapshots = []         # the newest `flud ls --json` list
        self._timer = None
        self._watch_timer = None
        self._stopped = False
        self.idle = defer.Deferred()  # fires when stop() finds no job running
        # hooks and notifications around each run (flud/agent/lifecycle.py)
        self.events = events if events is not None else job_events(reactor, home, config)
        self.battery = battery      # () -> on battery? (None: psutil's answer)
        self.paused = None          # why no job starts now, or None

    def start(self) -> None:
        self._refresh_snapshots()
        self._tick()
        self._watch()

    def _watch(self) -> None:
        """The overdue and safety notices, by the page's own verdict: on a
        timer of their own, so that a long job (a day-long first backup)
        does not silence them."""
        self._watch_timer = None
        if self._stopped:
            return
        now = self.reactor.seconds()
        try:
            records = self.history.read()
            paused = self.scheduler.paused_until
            verdict = verdict_of(now, self.jobs, records,
                                 paused if paused and paused > now else None, self.config.rules)
            self.events.tick(now, records, verdict)
        except Exception:   # a notice that cannot be sent must not stop the agent
            log.exception("the overdue and safety check failed")
        self._watch_timer = self.reactor.callLater(MAX_SLEEP, self._watch)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._watch_timer is not None and self._watch_timer.active():
            self._watch_timer.cancel()
        self._watch_timer = None
        if self.running is None and not self.idle.called:
            self.idle.callback(None)

    def status(self) -> dict:
        now = self.reactor.seconds()
        paused = self.scheduler.paused_until
        return build_status(now, self.home, self.jobs, self.states,
                            self.scheduler.next_runs(now), self.history.read(),
                            self.snapshots, self.running,
                            paused_until=paused if paused and paused > now else None,
                            rules=self.config.rules, power_pause=self.paused,
                            notify_state=self.events.notify_state())

    # ---- what the page asks for -------------------------------------------

    def ask(self, name: str) -> str:
        """Run job `name` as soon as nothing runs (the page's "back up now")."""
        if name not in ASKABLE:
            raise ValueError(f"no job {name!r} to start; known: {', '.join(ASKABLE)}")
        if name == "backup" and self.states.get("backup") is not None:
            raise ValueError(f"backup cannot run: {self.states['backup']}")
        self._asked.add(name)
        self.scheduler.request(name)
        self._kick()
        return f"{name} asked for: it starts as soon as nothing else runs"

    def ask_restore(self, snapshot: int, path: str, dest: str) -> str:
        """Restore `path` of snapshot `snapshot` (every path if empty) under dest."""
        if not os.path.isabs(dest):
            raise ValueError(f"the folder to restore to must be an absolute path, not {dest!r}")
        self.adhoc["restore"] = ["restore", *([path] if path else []), "--snapshot",
                                 str(int(snapshot)), "--to", dest]
        self._asked.add("restore")
        self.scheduler.request("restore")
        self._kick()
        return f"restore of {path or 'the whole snapshot'} to {dest} asked for"

    def pause(self, until) -> str:
        """No scheduled job starts before `until` (None: resume)."""
        self.scheduler.pause(until)
        path = os.path.join(self.home, PAUSE_NAME)
        if until is None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            self._kick()
            return "resumed"
        with open(path + ".tmp", "w") as f:
            json.dump({"until": until}, f)
        os.replace(path + ".tmp", path)
        return "paused"

    def _read_pause(self):
        try:
            with open(os.path.join(self.home, PAUSE_NAME)) as f:
                until = json.load(f).get("until")
        except (OSError, ValueError, AttributeError):
            return None
        return until if isinstance(until, (int, float)) else None

    def _ask_again(self, name: str, arguments) -> None:
        if self._stopped:
            return
        if arguments is not None:
            self.adhoc[name] = arguments
        self._asked.add(name)
        self.scheduler.request(name)
        self._kick()

    def _kick(self) -> None:
        """Look for work now, not at the timer's next tick."""
        if self._stopped or self.running is not None:
            return
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self.reactor.callLater(0, self._tick)

    # ---- the loop ----------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        if self._stopped:
            return
        now = self.reactor.seconds()
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
        asked = name in self._asked   # from the page: asked again if the home is busy
        self._asked.discard(name)
        arguments = self.adhoc.pop(name, None)
        moment = self.reactor.seconds()
        if arguments is not None:
            argv = job_table.arguments_line(arguments, self.config, self.home, self.python,
                                            moment=moment, tz=self.scheduler.tz)
        else:
            argv = job_table.command_line(name, self.config, self.home, self.python,
                                          moment=moment, tz=self.scheduler.tz)
        self.running = {"job": name, "start": start, "pid": None, "progress": None}
        refusal = yield self.events.before(name)
        log.info("starting %s: %s", name, " ".join(argv[1:]))
        try:
            if isinstance(refusal, dict):   # the home is busy: as if the job had said so
                result = refusal
            elif refusal:   # an essential before_ hook failed: the job does not run
                raise HookRefused(refusal)
            else:
                result = yield self.spawn(self.reactor, argv, started=self._started,
                                          timeout=self.config.job_timeout,
                                          on_line=self._progress)
        except Exception as err:  # could not even start it
            result = {"exit": None, "signal": None, "summary": None, "stderr": str(err)}
        end = self.reactor.seconds()
        summary = result.get("summary")
        error = (summary or {}).get("error") if isinstance(summary, dict) else None
        if error and error.get("code") == "HOME_BUSY":
            log.warning("%s postponed: %s", name, error.get("message"))
            self.running = None
            self.scheduler.postpone(name, end + BUSY_RETRY)
            if asked:   # a button's run is not dropped: it is asked for again then
                self.reactor.callLater(BUSY_RETRY, self._ask_again, name, arguments)
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

    def _progress(self, line: dict) -> None:
        """A running job's status line (docs/json.md): the page shows it."""
        if self.running is not None and line.get("type") == "status":
            self.running["progress"] = {k: line.get(k) for k in
                                        ("phase", "files_done", "total_files", "bytes_done",
                                         "total_bytes", "percent_done", "seconds_remaining")}

    @defer.inlineCallbacks
    def browse(self, snapshot: int, path: str):
        """One directory of a snapshot: {entries: [{name, kind, size, mtime_ns,
        mode}], error?} from `flud ls --dir` (read-only: it runs beside a job).
        The last BROWSE_CACHE listings are kept: a snapshot never changes."""
        key = (snapshot, path)
        if key in self._listings:
            return self._listings[key]
        argv = [self.python, "-m", "flud", "ls", "--home", self.home, "--json",
                "--snapshot", str(int(snapshot)), "--dir", path or "/"]
        result = yield self.spawn(self.reactor, argv)
        summary = result.get("summary") or {}
        if summary.get("error"):
            return {"entries": [], "error": summary["error"].get("message", "failed")}
        listing = {"entries": summary.get("entries") or [],
                   "truncated": bool(summary.get("truncated"))}
        self._listings[key] = listing
        while len(self._listings) > BROWSE_CACHE:
            self._listings.pop(next(iter(self._listings)))
        return listing

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
