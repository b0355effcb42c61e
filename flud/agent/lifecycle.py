"""What happens around each of the agent's jobs: hooks and notifications.

The agent calls before(job) ahead of a run (a notification goes out, the
before_ hook runs; an essential hook that failed is returned as the reason
the job must not run), after(job, record, log) once it ended (the after_
or on_error hook, then the success or failure notification; the record may
come back marked failed), and tick(now, records) on every wake-up (the
overdue and safety notices, sent on their own schedule).
"""
from twisted.internet import defer

from flud.agent.hooks import hook_environment, run_hook
from flud.agent.notify import succeeded


class JobEvents:
    def __init__(self, reactor, home: str, hooks: dict, notifier=None, spawn=None):
        self.reactor = reactor
        self.home = home
        self.hooks = hooks           # name -> Hook (flud/agent/hooks.py)
        self.notifier = notifier     # flud/agent/notifier.py's Notifier, or None
        self.spawn = spawn           # the hooks' process runner (None: run_job)

    @defer.inlineCallbacks
    def before(self, job: str):
        """None when the job may run; else why it must not (a before_ hook
        failed), or, when the home is busy, the result a job that found it
        busy gives (the agent postpones it: no hook ran, none is owed)."""
        hook = self.hooks.get(f"before_{job}")
        if hook is not None:
            busy = home_busy(self.home)
            if busy is not None:
                return {"exit": 2, "signal": None, "stderr": busy, "summary": {
                    "command": job, "exit": 2, "error": {"code": "HOME_BUSY",
                                                        "message": busy}}}
        if self.notifier is not None:
            self.notifier.job_started(job)
        if hook is None:
            return None
        result = yield run_hook(self.reactor, hook, hook_environment(hook, job, self.home),
                                self.spawn)
        if result.ok or not hook.essential:
            return None
        return result.why

    @defer.inlineCallbacks
    def after(self, job: str, record: dict, log: str = ""):
        """The record, marked failed if an essential after_ hook failed."""
        summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
        snapshot = summary.get("snapshot")
        if succeeded(record):
            hook = self.hooks.get(f"after_{job}")
            if hook is not None:
                env = hook_environment(hook, job, self.home, record.get("exit"), snapshot)
                result = yield run_hook(self.reactor, hook, env, self.spawn)
                if not result.ok and hook.essential:
                    record = {**record, "error": result.why}
                    log = (log + "\n" + result.why).strip()
        if not succeeded(record):
            hook = self.hooks.get("on_error")
            if hook is not None:
                error = record.get("error") or _summary_error(summary) or \
                    f"exit {record.get('exit')}"
                env = hook_environment(hook, job, self.home, record.get("exit"), snapshot,
                                       error)
                yield run_hook(self.reactor, hook, env, self.spawn)
        if self.notifier is not None:
            self.notifier.job_ended(job, record, log)
        return record

    def tick(self, now: float, records, verdict=None) -> None:
        """The overdue notice, and the safety notice for the page's verdict
        (flud/agent/safety.py) when it is given."""
        if self.notifier is not None:
            self.notifier.check_overdue(now, records)
            if verdict is not None:
                self.notifier.check_safety(now, verdict)

    def notify_state(self):
        """The notifier's state for the status page, or None without one."""
        return None if self.notifier is None else self.notifier.state()


def _summary_error(summary: dict):
    error = summary.get("error") if isinstance(summary, dict) else None
    return error.get("message") if isinstance(error, dict) else None


def home_busy(home: str):
    """Why the home's job lock is held now, or None. Asked before a before_
    hook runs, so that a backup a `flud backup` by hand keeps waiting does
    not leave a hook's snapshot or mount behind with no after_ hook to come
    (a job may still take the lock in between: then it is postponed as ever)."""
    from flud.agent.lock import HomeBusy, HomeLock
    probe = HomeLock(home)
    try:
        probe.acquire()
    except HomeBusy as err:
        return str(err)
    except OSError:
        return None
    probe.release()
    return None


class HookRefused(Exception):
    """An essential before_ hook failed: the job was not started."""


def job_events(reactor, home: str, config) -> JobEvents:
    """The JobEvents agent.toml asks for (no notifier without destinations)."""
    notifier = None
    if config.notify.any:
        from flud.agent.jobs import job_states
        from flud.agent.notifier import Notifier
        notifier = Notifier(reactor, config.notify, home,
                            backup_note=job_states(config).get("backup"))
    return JobEvents(reactor, home, config.hooks, notifier)


def power_pause(config, probe=None):
    """Why no job may start now ([power] pause_on_battery), or None."""
    if not config.pause_on_battery:
        return None
    from flud.agent.bandwidth import on_battery
    return "paused: on battery ([power] pause_on_battery)" if on_battery(probe) else None
