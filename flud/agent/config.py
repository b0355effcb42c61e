"""The agent's configuration: agent.toml in the client home.

TOML rather than INI: its values are typed (a number is a number, a list of
paths is a list, true is a boolean), so nothing here guesses what "6" or
"a, b" meant; it is a standard with a reader in the standard library
(tomllib), whose errors carry the line and column. The file is written from
the commented text below, never by a TOML writer: the comments are the
documentation a user edits against, and a writer would drop them.
"""
import dataclasses
import os
import re
import tomllib

from flud import units
from flud.agent.bandwidth import parse_windows
from flud.agent.hooks import parse_hooks
from flud.agent.notify import EVENTS, JOBS, NotifyConfig
from flud.agent.safety import Rules
from flud.errors import FludError

CONFIG_NAME = "agent.toml"
DEFAULT_PORT = 8786
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

DEFAULT_TEXT = f"""\
# flud agent configuration (TOML). `flud agent --home HOME` reads it at start.
# Times: an interval ("30min", "6h", "1d", "1w") with `every`, or a time of day
# ("02:30", local time) with `at`; a bare "m" is refused (write "min" or "mo").
# Rates: "1MiB/s", "500K", or a number of KiB/s. Sizes: "64M", "1GiB" (1024s).

[backup]
enabled = true
paths = []              # directories to back up, e.g. ["/home/me/docs", "/home/me/photos"]
exclude = []            # glob patterns left out, e.g. ["*.tmp", "*/.cache/*"]
exclude_file = []       # files of gitignore-style patterns, e.g. ["/home/me/.config/flud-excludes"]
exclude_caches = true   # a directory with a valid CACHEDIR.TAG keeps only the tag
exclude_if_present = [] # a directory holding one of these names keeps only it, e.g. [".nobackup"]
one_file_system = false # true: do not go into other file systems (mount points are kept empty)
exclude_larger_than = ""  # leave out files larger than this, e.g. "2G"; "": no limit
every = "6h"            # or: at = "02:30"

[verify]
enabled = true
every = "1d"            # challenge the holders of your shares

[check]
enabled = true          # challenge a rotating part of the shares (`flud check`)
every = "1d"            # daily: every share is challenged within a week
repair = true           # re-create what falls below the repair threshold (`--repair`)
read_data_subset = ""   # also download and hash-check this part, e.g. "1/7" or "0.05"

[forget]
enabled = false         # `flud forget` by the policy below (then `--prune`)
every = "1d"
prune = true            # delete what no kept snapshot reaches (`--prune`)
keep_last = 0
keep_daily = 7
keep_weekly = 4
keep_monthly = 12

[limits]
upload = 0              # KiB/s for every job's uploads; 0: no limit
download = 0            # KiB/s for every job's downloads; 0: no limit

[notify]
urls = []               # apprise URLs, e.g. ["ntfy://ntfy.sh/my-topic", "mailto://me:pw@example.org"]
ping_url = ""           # healthchecks-style: URL/start, URL (success), URL/fail for each backup
events = ["failure", "overdue", "safety"]   # what goes to urls: start, success, failure,
                        # overdue, safety (the page turns red: objects lost, lease ending)
overdue_after = "3d"    # no successful backup for this long: the page turns red, a notice,
overdue_repeat = "1d"   # repeated this often while it lasts
log_lines = 20          # lines of the job's log sent with a failure

[status]                # when the page's headline (and the notices) call the data at risk
overdue_warn = ""       # amber this long after the last successful backup; "": twice the
                        # backup interval, at least a day (red: [notify] overdue_after)
check_stale = "7d"      # amber when redundancy was last checked this long ago
lease_warn = "90d"      # amber when the nodes keep the data for less than this more
lease_alarm = "30d"     # red ... (and a notice, with "safety" in [notify] events)

[hooks]                 # shell commands (/bin/sh -c); see docs/living.md
before_backup = ""      # e.g. "pg_dump mydb > /home/me/db.sql"; if it fails, no backup
after_backup = ""       # after a backup that succeeded ($FLUD_SNAPSHOT: its id)
on_error = ""           # after any job that failed ($FLUD_JOB, $FLUD_ERROR)
timeout = "10min"       # a hook still running after this is stopped, and failed
essential = true        # a failed hook fails the job (false: logged, the job goes on)

[power]
pause_on_battery = false  # start no job while the machine runs on battery

# Bandwidth by time of day: inside a window its limits replace [limits].
# [[bandwidth]]
# from = "08:00"
# to = "18:00"            # "22:00" to "06:00" runs over midnight
# days = ["mon", "tue", "wed", "thu", "fri"]   # optional: every day
# upload = "1MiB/s"       # a rate left out keeps [limits]' value
# download = "4MiB/s"

[agent]
listen = "{DEFAULT_LISTEN}"   # the status page; loopback addresses only
history = 100           # runs of each job kept in agent-history.jsonl
job_timeout = "1d"      # a job still running after this long is stopped (SIGTERM)
"""


class ConfigError(FludError):
    """agent.toml cannot be read or holds a value of the wrong kind."""

    code = "AGENT_CONFIG"


@dataclasses.dataclass(frozen=True)
class JobConfig:
    enabled: bool
    every: float = None     # seconds, or None
    at: tuple = None        # (hour, minute), or None
    options: dict = dataclasses.field(default_factory=dict)  # the section's other keys


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    path: str
    jobs: dict              # job name -> JobConfig
    upload: int             # bytes/s, 0: no limit
    download: int
    listen: tuple           # (host, port)
    history: int
    job_timeout: float = 86400.0   # seconds
    notify: NotifyConfig = NotifyConfig()
    hooks: dict = dataclasses.field(default_factory=dict)   # name -> Hook
    bandwidth: tuple = ()           # flud/agent/bandwidth.py's Windows
    pause_on_battery: bool = False
    rules: Rules = Rules()          # [status]: the safety verdict's thresholds


def parse_interval(text) -> float:
    """'90s', '30min', '6h', '1d', '1w' -> seconds (flud/units.py's grammar)."""
    try:
        seconds = units.parse_seconds(text)
    except units.UnitError as err:
        raise ValueError(f"expected an interval such as \"30min\", \"6h\" or \"1d\": "
                         f"{err}") from None
    if seconds <= 0:
        raise ValueError(f"expected an interval such as \"30min\", \"6h\" or \"1d\", "
                         f"got {text!r}")
    return seconds


def parse_time_of_day(text) -> tuple:
    """'02:30' -> (2, 30)."""
    hour, minute = units.parse_time_of_day(text)
    if hour > 23:
        raise ValueError(f"expected a time of day such as \"02:30\", got {text!r}")
    return hour, minute


def parse_rate(text) -> int:
    """A rate in bytes/s: a number of KiB/s, or '500K', '10M', '1MiB/s'
    (powers of 1024); 0 means no limit."""
    return units.parse_rate(text)


def parse_listen(text: str) -> tuple:
    """'127.0.0.1:8786' -> ('127.0.0.1', 8786); loopback addresses only: the
    page shows file names and has no login."""
    host, sep, port = str(text).rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT such as {DEFAULT_LISTEN}, got {text!r}")
    if not (host == "localhost" or host == "::1" or re.fullmatch(r"127(\.\d{1,3}){3}", host)):
        raise ValueError(f"the status page listens on loopback addresses only (127.x.x.x, "
                         f"::1, localhost), not {host!r}: it has no login")
    return host, int(port)


def config_path(home: str) -> str:
    return os.path.join(home, CONFIG_NAME)


def write_default(home: str) -> str:
    """Write the commented default agent.toml into home (never over one)."""
    path = config_path(home)
    with open(path, "x") as f:
        f.write(DEFAULT_TEXT)
    return path


def load(home: str) -> AgentConfig:
    """Read home/agent.toml (the defaults where it is missing)."""
    path = config_path(home)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = DEFAULT_TEXT.encode()
    return parse(raw.decode("utf-8", "replace"), path)


def parse(text: str, path: str = CONFIG_NAME) -> AgentConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        # tomllib's message ends "(at line L, column C)": put the place first
        found = re.fullmatch(r"(.*?)\s*\(at line (\d+), column (\d+)\)", str(err), re.S)
        if found is None:
            raise ConfigError(f"{path}: not valid TOML: {err}") from None
        what, line, column = found.groups()
        raise ConfigError(f"{path}: line {line}, column {column}: not valid TOML: "
                          f"{what}") from None
    defaults = tomllib.loads(DEFAULT_TEXT)
    reader = _Reader(path, text)
    for section, values in data.items():
        if section == "bandwidth":
            continue
        if section not in defaults:
            raise reader.error(section, None, f"unknown section [{section}]; known: "
                               f"{', '.join(sorted([*defaults, '[bandwidth]']))}")
        if not isinstance(values, dict):
            raise reader.error(section, None, f"{section} must be a [section]")
    jobs = {}
    for name in ("backup", "verify", "check", "forget"):
        jobs[name] = reader.job(name, data.get(name, {}), defaults[name])
    _check_backup(reader, jobs["backup"].options)
    limits = {**defaults["limits"], **data.get("limits", {})}
    agent = {**defaults["agent"], **data.get("agent", {})}
    upload = reader.convert("limits", "upload", limits["upload"], parse_rate)
    download = reader.convert("limits", "download", limits["download"], parse_rate)
    listen = reader.convert("agent", "listen", agent["listen"], parse_listen)
    history = agent["history"]
    if type(history) is not int or history < 1:
        raise reader.error("agent", "history", f"expected a whole number of at least 1, "
                           f"got {history!r}")
    timeout = reader.convert("agent", "job_timeout", agent["job_timeout"], parse_interval)
    notify = _notify(reader, data.get("notify", {}), defaults["notify"])
    hooks = parse_hooks(data.get("hooks", {}), lambda key, what: reader.error("hooks", key, what),
                        units.parse_seconds)
    power = {**defaults["power"], **data.get("power", {})}
    if type(power["pause_on_battery"]) is not bool or set(power) != {"pause_on_battery"}:
        raise reader.error("power", None, "expected pause_on_battery = true or false")
    bandwidth = parse_windows(
        data.get("bandwidth", []),
        lambda index, key, what: ConfigError(
            f"{path}: [[bandwidth]] number {index}{f' {key}' if key else ''}: {what}"),
        units.parse_time_of_day, parse_rate)
    rules = _rules(reader, data.get("status", {}), defaults["status"], notify)
    return AgentConfig(path, jobs, upload, download, listen, history, timeout, notify, hooks,
                       bandwidth, power["pause_on_battery"], rules)


def _rules(reader, values: dict, defaults: dict, notify: NotifyConfig) -> Rules:
    """[status]'s thresholds; red for an overdue backup is [notify]
    overdue_after, so the page turns red when the notice goes out."""
    merged = {**defaults, **values}
    for key in values:
        if key not in defaults:
            raise reader.error("status", key, f"unknown key; known: {', '.join(sorted(defaults))}")
    seconds = {}
    for key, value in merged.items():
        if key == "overdue_warn" and value == "":
            seconds[key] = None
            continue
        seconds[key] = reader.convert("status", key, value, parse_interval)
    if seconds["lease_alarm"] > seconds["lease_warn"]:
        raise reader.error("status", "lease_alarm", "must not be longer than lease_warn")
    return Rules(overdue_warn=seconds["overdue_warn"], overdue_alarm=notify.overdue_after,
                 check_stale=seconds["check_stale"], lease_warn=seconds["lease_warn"],
                 lease_alarm=seconds["lease_alarm"])


def _notify(reader, values: dict, defaults: dict) -> NotifyConfig:
    merged = {**defaults, "jobs": list(JOBS), "timeout": "10s", "retries": 3, **values}
    for key, value in values.items():
        if key not in merged:
            raise reader.error("notify", key, f"unknown key; known: {', '.join(sorted(merged))}")
    for key in ("urls", "events", "jobs"):
        value = merged[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise reader.error("notify", key, f"expected a list of strings, got {value!r}")
    for key, known in (("events", EVENTS), ("jobs", JOBS)):
        wrong = [v for v in merged[key] if v not in known]
        if wrong:
            raise reader.error("notify", key, f"unknown {key[:-1]} {wrong[0]!r}; known: "
                                              f"{', '.join(known)}")
    ping = merged["ping_url"]
    if not isinstance(ping, str) or (ping and not ping.startswith(("http://", "https://"))):
        raise reader.error("notify", "ping_url", f"expected an http:// or https:// URL, "
                                                 f"got {ping!r}")
    for key in ("log_lines", "retries"):
        if type(merged[key]) is not int or not 0 <= merged[key] <= 1000:
            raise reader.error("notify", key, f"expected a whole number from 0 to 1000, "
                                              f"got {merged[key]!r}")
    seconds = {key: reader.convert("notify", key, merged[key], parse_interval)
               for key in ("overdue_after", "overdue_repeat", "timeout")}
    return NotifyConfig(tuple(merged["urls"]), ping, frozenset(merged["events"]),
                        frozenset(merged["jobs"]), seconds["overdue_after"],
                        seconds["overdue_repeat"], merged["log_lines"], seconds["timeout"],
                        merged["retries"])


def _check_backup(reader, options) -> None:
    """The [backup] values a job would only refuse later: said now, with their line."""
    from flud.client.backup.source_excludes import parse_size

    if options["exclude_larger_than"]:
        reader.convert("backup", "exclude_larger_than", options["exclude_larger_than"],
                       parse_size)
    for name in options["exclude_if_present"]:
        if not name or "/" in name:
            raise reader.error("backup", "exclude_if_present",
                               f"expected file names without '/', got {name!r}")


class _Reader:
    """Turns a key's wrong value into an error naming its line and key."""

    def __init__(self, path, text):
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, section, key) -> int:
        """The line of `key =` in [section] (0 when it is not written)."""
        current = None
        for number, line in enumerate(self.lines, 1):
            stripped = line.strip()
            header = re.fullmatch(r"\[\s*([^\]]+?)\s*\]\s*(#.*)?", stripped)
            if header:
                current = header.group(1)
                if key is None and current == section:
                    return number
                continue
            if current == section and key and re.match(rf"{re.escape(key)}\s*=", stripped):
                return number
        return 0

    def error(self, section, key, what) -> ConfigError:
        line = self.line_of(section, key)
        where = f"line {line}: " if line else ""
        name = f"[{section}] {key}" if key else f"[{section}]"
        return ConfigError(f"{self.path}: {where}{name}: {what}")

    def convert(self, section, key, value, parser):
        try:
            return parser(value)
        except ValueError as err:
            raise self.error(section, key, str(err)) from None

    def job(self, name, values, defaults) -> JobConfig:
        merged = {**defaults, **values}
        for key, value in values.items():
            if key == "at":
                continue
            if key not in defaults:
                raise self.error(name, key, f"unknown key; known: {', '.join(sorted(defaults))}")
            want = type(defaults[key])
            if type(value) is not want:
                raise self.error(name, key, f"expected {_kind(want)}, got {value!r}")
            if want is list and not all(isinstance(v, str) for v in value):
                raise self.error(name, key, f"expected a list of strings, got {value!r}")
        every = at = None
        if "at" in values:
            at = self.convert(name, "at", values["at"], parse_time_of_day)
            if "every" in values:
                raise self.error(name, "at", "give `every` or `at`, not both")
        else:
            every = self.convert(name, "every", merged["every"], parse_interval)
        enabled = merged.get("enabled", True)
        options = {k: v for k, v in merged.items() if k not in ("enabled", "every", "at")}
        return JobConfig(enabled, every, at, options)


def _kind(kind) -> str:
    return {bool: "true or false", int: "a whole number", str: "a string in quotes",
            list: "a list such as [\"a\", \"b\"]", float: "a number"}.get(kind, kind.__name__)
