"""`--json`: JSON lines on stdout, one object a line (docs/json.md, the
schema in docs/json-schema.json).

Every line carries "type" ("status", "error" or "summary"), "schema"
(SCHEMA_VERSION), "command" and "time" (RFC 3339, UTC). A long job
(LONG_JOBS) prints a status line when it starts and then every
STATUS_INTERVAL seconds while it runs; an error line for each warning or
error it logs; and, last, one summary line: the fields each command always
printed, with the common ones added. A reader that wants only the outcome
reads the last line.
"""
import datetime
import json
import logging

SCHEMA_VERSION = 1
STATUS_INTERVAL = 1.0
LONG_JOBS = frozenset({"backup", "restore", "check", "verify", "prune", "forget"})
MAX_ERROR_LINES = 1000   # error lines per run at most (the summary counts the rest)


def rfc3339(t: float) -> str:
    """A Unix time as RFC 3339 in UTC, to the millisecond: 2026-11-26T15:28:42.123Z."""
    moment = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _now() -> float:
    import time
    return time.time()


def line(kind: str, command: str, clock=_now, **fields) -> str:
    return json.dumps({"type": kind, "schema": SCHEMA_VERSION, "command": command,
                       "time": rfc3339(clock()), **fields}, default=str)


def summary_line(command: str, record: dict, clock=_now) -> str:
    """The last line: the command's summary, the common fields in front."""
    return line("summary", command, clock, **{k: v for k, v in record.items()
                                               if k not in ("type", "schema", "command", "time")})


def status_fields(progress, elapsed: float) -> dict:
    """What a status line says of a job's Progress (client/progress.py)."""
    total, done = progress.total_bytes, progress.bytes
    fields = {"phase": progress.verb, "elapsed": round(elapsed, 3),
              "files_done": progress.files, "total_files": progress.total_files,
              "bytes_done": done, "total_bytes": total, "percent_done": None,
              "seconds_remaining": None}
    if total:
        fields["percent_done"] = round(min(100.0, 100.0 * done / total), 2)
        if done and elapsed > 0:
            fields["seconds_remaining"] = round(max(0.0, (total - done) * elapsed / done), 1)
    return fields


class JsonLines:
    """The lines of one run: status on a timer (the reactor's), errors as
    they are logged. out: the real stdout (the job's own prints go to
    stderr under --json)."""

    def __init__(self, reactor, out, command: str, progress, clock=_now):
        self.reactor = reactor
        self.out = out
        self.command = command
        self.progress = progress
        self.clock = clock
        self.errors = 0
        self._started = reactor.seconds()
        self._loop = None
        self._handler = _ErrorLines(self)

    def start(self) -> None:
        from twisted.internet import task

        logging.getLogger().addHandler(self._handler)
        self.progress.on_warn = lambda text: self.error("WARNING", text, "warning")
        if self.command in LONG_JOBS:
            self._loop = task.LoopingCall(self.status)
            self._loop.clock = self.reactor
            self._loop.start(STATUS_INTERVAL, now=True)

    def stop(self) -> None:
        logging.getLogger().removeHandler(self._handler)
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def status(self) -> None:
        elapsed = self.reactor.seconds() - self._started
        self._write(line("status", self.command, self.clock,
                         **status_fields(self.progress, elapsed)))

    def error(self, code: str, message: str, level: str = "error") -> None:
        self.errors += 1
        if self.errors <= MAX_ERROR_LINES:
            self._write(line("error", self.command, self.clock, level=level, code=code,
                             message=message))

    def _write(self, text: str) -> None:
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):   # the reader went away: the job goes on
            pass


class _ErrorLines(logging.Handler):
    """Each warning or error a job logs, as an error line."""

    def __init__(self, lines: JsonLines):
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not end the job
            message = str(record.msg)
        severe = record.levelno >= logging.ERROR
        self.lines.error(getattr(record, "code", None) or ("ERROR" if severe else "WARNING"),
                         message, "error" if severe else "warning")
