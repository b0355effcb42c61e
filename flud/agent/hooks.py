"""Commands run around the agent's jobs: agent.toml's [hooks].

    before_backup  before each backup (a database dump, a filesystem snapshot)
    after_backup   after a backup that succeeded
    on_error       after any job that failed (a before_backup that failed too)

Each is a shell command (`/bin/sh -c`), or a table with its own `timeout`
and `essential`. An essential hook that fails (exit not 0, or still running
after its timeout) fails the job: a failed before_backup means the backup
does not run (its data may be half-dumped), a failed after_backup marks the
backup failed. An optional one is logged and the job goes on. A hook sees
FLUD_HOOK, FLUD_JOB, FLUD_HOME, FLUD_EXIT_CODE (the job's, "" before it),
FLUD_SNAPSHOT (the snapshot a backup made, or "") and FLUD_ERROR (why the
job failed, for on_error) in its environment, never FLUD_PASSPHRASE.
"""
import dataclasses
import logging
import os

from twisted.internet import defer

log = logging.getLogger("flud.agent.hooks")

HOOK_NAMES = ("before_backup", "after_backup", "on_error")
DEFAULT_TIMEOUT = 600.0
OUTPUT_TAIL = 2000   # characters of a failed hook's output kept in the job's error


@dataclasses.dataclass(frozen=True)
class Hook:
    name: str
    command: str
    timeout: float = DEFAULT_TIMEOUT
    essential: bool = True


@dataclasses.dataclass(frozen=True)
class HookResult:
    ok: bool
    why: str = ""      # "" when ok


def parse_hooks(values: dict, error, parse_seconds) -> dict:
    """name -> Hook from the [hooks] section; error(key, what) builds the
    error to raise, parse_seconds reads a duration."""
    timeout = DEFAULT_TIMEOUT
    essential = True
    if "timeout" in values:
        timeout = _convert(error, "timeout", values["timeout"], parse_seconds)
    if "essential" in values:
        if type(values["essential"]) is not bool:
            raise error("essential", f"expected true or false, got {values['essential']!r}")
        essential = values["essential"]
    hooks = {}
    for key, value in values.items():
        if key in ("timeout", "essential"):
            continue
        if key not in HOOK_NAMES:
            raise error(key, f"unknown key; known: {', '.join(HOOK_NAMES)}, timeout, essential")
        if isinstance(value, str):
            if value.strip():
                hooks[key] = Hook(key, value, timeout, essential)
            continue
        if not isinstance(value, dict) or not isinstance(value.get("command"), str):
            raise error(key, "expected a command in quotes, or a table such as "
                             "{ command = \"...\", timeout = \"5min\", essential = false }")
        unknown = set(value) - {"command", "timeout", "essential"}
        if unknown:
            raise error(key, f"unknown key {sorted(unknown)[0]!r}; known: command, timeout, "
                             f"essential")
        own_timeout = (_convert(error, key, value["timeout"], parse_seconds)
                       if "timeout" in value else timeout)
        own_essential = value.get("essential", essential)
        if type(own_essential) is not bool:
            raise error(key, f"essential: expected true or false, got {own_essential!r}")
        if value["command"].strip():
            hooks[key] = Hook(key, value["command"], own_timeout, own_essential)
    return hooks


def _convert(error, key, value, parser):
    try:
        seconds = parser(value)
    except ValueError as err:
        raise error(key, str(err)) from None
    if seconds <= 0:
        raise error(key, f"a hook's timeout must be longer than 0, got {value!r}")
    return seconds


def hook_environment(hook: Hook, job: str, home: str, exit_code=None, snapshot=None,
                     error: str = "") -> dict:
    env = dict(os.environ)
    env.pop("FLUD_PASSPHRASE", None)
    env.update(FLUD_HOOK=hook.name, FLUD_JOB=job, FLUD_HOME=home,
               FLUD_EXIT_CODE="" if exit_code is None else str(exit_code),
               FLUD_SNAPSHOT="" if snapshot is None else str(snapshot),
               FLUD_ERROR=error or "")
    return env


@defer.inlineCallbacks
def run_hook(reactor, hook: Hook, env: dict, spawn=None):
    """Run one hook; fires with a HookResult (never fails). spawn:
    flud/agent/runner.py's run_job, or a fake with its signature."""
    if spawn is None:
        from flud.agent.runner import run_job as spawn
    log.info("hook %s: %s", hook.name, hook.command)
    try:
        result = yield spawn(reactor, ["/bin/sh", "-c", hook.command], env=env,
                             timeout=hook.timeout)
    except Exception as err:   # could not even start /bin/sh
        return HookResult(False, f"{hook.name} hook could not start: {err}")
    if result.get("timed_out"):
        why = f"{hook.name} hook still running after its timeout ({hook.timeout:g} s)"
    elif result.get("exit") != 0:
        how = (f"signal {result['signal']}" if result.get("signal")
               else f"exit {result.get('exit')}")
        why = f"{hook.name} hook failed ({how})"
    else:
        return HookResult(True)
    output = (result.get("stderr") or "").strip()
    if output:
        why += ": " + output[-OUTPUT_TAIL:]
    log.warning("%s", why)
    return HookResult(False, why)
