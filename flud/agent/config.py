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

from flud.errors import FludError

CONFIG_NAME = "agent.toml"
DEFAULT_PORT = 8786
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

DEFAULT_TEXT = f"""\
# flud agent configuration (TOML). `flud agent --home HOME` reads it at start.
# Times: an interval ("30m", "6h", "1d", "1w") with `every`, or a time of day
# ("02:30", local time) with `at`. Rates: KiB/s as a number, or "500K", "10M".

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


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RATE_UNITS = {"": 1024, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def parse_interval(text: str) -> float:
    """'90s', '30m', '6h', '1d', '1w' -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", str(text).lower())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected an interval such as \"30m\", \"6h\" or \"1d\", got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_time_of_day(text: str) -> tuple:
    """'02:30' -> (2, 30)."""
    match = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", str(text))
    if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise ValueError(f"expected a time of day such as \"02:30\", got {text!r}")
    return int(match.group(1)), int(match.group(2))


def parse_rate(text) -> int:
    """A rate in bytes/s from KiB/s (a number) or '500K', '10M', '1G'
    (per second, powers of 1024); 0 means no limit."""
    if isinstance(text, bool):
        raise ValueError(f"expected a rate such as 512 (KiB/s) or \"10M\", got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"a rate cannot be negative, got {text!r}")
        return int(text * 1024)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?(?:/s)?\s*", str(text).lower())
    if not match:
        raise ValueError(f"expected a rate such as 512 (KiB/s) or \"10M\", got {text!r}")
    return int(float(match.group(1)) * _RATE_UNITS[match.group(2)])


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
        if section not in defaults:
            raise reader.error(section, None, f"unknown section [{section}]; known: "
                               f"{', '.join(sorted(defaults))}")
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
    return AgentConfig(path, jobs, upload, download, listen, history, timeout)


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
