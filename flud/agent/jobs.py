"""The agent's jobs, one row each: the `flud` command line a job runs is
built from its section of agent.toml.

A row whose command this flud does not have yet is kept with
available=False: the agent lists it and never runs it. Enabling one once
its command exists is flipping that flag.
"""
import dataclasses
import datetime
import sys
from typing import Callable

from flud.agent.bandwidth import limits_at, schedule_json


@dataclasses.dataclass(frozen=True)
class JobRow:
    name: str
    arguments: Callable   # JobConfig -> the arguments after `flud`
    available: bool       # this version of flud has the command
    ready: Callable = lambda job: None  # JobConfig -> why it cannot run, or None


def _backup(job) -> list:
    args = ["backup", *job.options["paths"]]
    options = job.options
    for pattern in options["exclude"]:
        args += ["--exclude", pattern]
    for path in options["exclude_file"]:
        args += ["--exclude-file", path]
    for name in options["exclude_if_present"]:
        args += ["--exclude-if-present", name]
    if options["exclude_caches"]:
        args.append("--exclude-caches")
    if options["one_file_system"]:
        args.append("--one-file-system")
    if options["exclude_larger_than"]:
        args += ["--exclude-larger-than", options["exclude_larger_than"]]
    return args


def _no_paths(job):
    return None if job.options["paths"] else "no paths to back up: set [backup] paths"


def _check(job) -> list:
    subset = job.options["read_data_subset"]
    return ["check", *(["--repair"] if job.options["repair"] else []),
            *(["--read-data-subset", subset] if subset else [])]


def _forget(job) -> list:
    args = ["forget"]
    for keep in ("keep_last", "keep_daily", "keep_weekly", "keep_monthly"):
        if job.options[keep]:
            args += ["--" + keep.replace("_", "-"), str(job.options[keep])]
    return args + (["--prune"] if job.options["prune"] else [])


JOBS = (
    JobRow("backup", _backup, True, _no_paths),
    JobRow("verify", lambda job: ["verify"], True),
    JobRow("check", _check, True),
    JobRow("forget", _forget, True),
)
ROWS = {row.name: row for row in JOBS}


def command_line(name: str, config, home: str, python: str = sys.executable,
                 moment: float = None, tz=None) -> list:
    """argv of the child process that runs job `name` with --json, with the
    rate limits of `moment` (unix time; [[bandwidth]] windows by local time)."""
    return arguments_line(ROWS[name].arguments(config.jobs[name]), config, home, python,
                          moment, tz)


def arguments_line(arguments: list, config, home: str, python: str = sys.executable,
                   moment: float = None, tz=None) -> list:
    """argv of a child process that runs `flud ARGUMENTS` on home with
    --json and the agent's rate limits (a restore asked for on the page)."""
    argv = [python, "-m", "flud", *arguments, "--home", home, "--json"]
    upload, download = config.upload, config.download
    if moment is not None and config.bandwidth:
        upload, download = limits_at(config.bandwidth, upload, download,
                                     datetime.datetime.fromtimestamp(moment, tz))
    if upload:
        argv += ["--limit-upload", f"{upload / 1024:g}"]
    if download:
        argv += ["--limit-download", f"{download / 1024:g}"]
    if config.bandwidth:   # the job follows the windows while it runs
        argv += ["--limit-schedule",
                 schedule_json(config.bandwidth, config.upload, config.download)]
    return argv


def job_states(config) -> dict:
    """name -> None when the agent runs it, or why it does not."""
    states = {}
    for row in JOBS:
        job = config.jobs[row.name]
        if not row.available:
            states[row.name] = f"`flud {row.name}` is not in this version yet"
        elif not job.enabled:
            states[row.name] = "disabled in agent.toml"
        else:
            states[row.name] = row.ready(job)
    return states


def scheduled(config) -> dict:
    """name -> (every, at) of the jobs the agent runs."""
    return {name: (config.jobs[name].every, config.jobs[name].at)
            for name, why in job_states(config).items() if why is None}
