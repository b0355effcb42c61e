"""A job as a child process of the agent (Twisted glue).

`python -m flud JOB --home H --json`: a crash of the job cannot take the
agent down, its memory goes back to the OS when it exits, and the last JSON
object it prints on stdout (its summary: docs/json.md) is the record of
the run; each status line before it goes to on_line as it comes (the page
shows the running job's progress). What the child prints is kept bounded:
the tail of stdout (MAX_STDOUT: a job that runs for days prints a status
line a second, and its summary comes last), the tail of stderr.
"""
import json
import os

from twisted.internet import defer, protocol
from twisted.internet.error import ProcessExitedAlready

MAX_STDOUT = 1024 * 1024
MAX_LINE = 64 * 1024     # a status line longer than this is not passed on
STDERR_TAIL = 8 * 1024
KILL_AFTER = 30.0   # seconds between a timed-out job's SIGTERM and SIGKILL


class _JobProtocol(protocol.ProcessProtocol):
    def __init__(self, done: defer.Deferred, on_line=None):
        self.done = done
        self.on_line = on_line
        self._partial = bytearray()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.pid = None

    def connectionMade(self):
        self.pid = self.transport.pid
        self.transport.closeStdin()

    def outReceived(self, data):
        self.stdout += data
        if len(self.stdout) > 2 * MAX_STDOUT:
            del self.stdout[:-MAX_STDOUT]
        if self.on_line is None:
            return
        self._partial += data
        *lines, rest = bytes(self._partial).split(b"\n")
        self._partial = bytearray(rest[-MAX_LINE:])
        for line in lines:
            if line.startswith(b"{") and len(line) < MAX_LINE:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    self.on_line(value)

    def errReceived(self, data):
        self.stderr += data
        if len(self.stderr) > 2 * STDERR_TAIL:
            del self.stderr[:-STDERR_TAIL]

    def processEnded(self, reason):
        code = getattr(reason.value, "exitCode", None)
        signal = getattr(reason.value, "signal", None)
        self.done.callback((code, signal))


def summary_of(stdout: bytes):
    """The job's JSON summary: the last line of stdout that is a JSON object
    and not a status or error line (docs/json.md)."""
    for line in reversed(bytes(stdout).splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("type") not in ("status", "error"):
            return value
    return None


@defer.inlineCallbacks
def run_job(reactor, argv: list, env: dict = None, started=None, timeout: float = None,
            on_line=None):
    """Run argv; fires with {exit, signal, summary, stderr, pid, timed_out}.
    started(pid) is called once the child exists; on_line(object) for each
    JSON line of its stdout as it comes. A child still running
    after `timeout` seconds gets SIGTERM, and SIGKILL KILL_AFTER later."""
    done = defer.Deferred()
    proto = _JobProtocol(done, on_line)
    child_env = dict(env if env is not None else os.environ)
    child_env.pop("FLUD_PASSPHRASE", None)
    child_env["PYTHONUNBUFFERED"] = "1"
    process = reactor.spawnProcess(proto, argv[0], argv, env=child_env)
    if started is not None:
        started(process.pid)
    timers, timed_out = [], []

    def stop(signal_name):
        timed_out.append(signal_name)
        try:
            process.signalProcess(signal_name)
        except ProcessExitedAlready:
            return
        if signal_name == "TERM":
            timers.append(reactor.callLater(KILL_AFTER, stop, "KILL"))

    if timeout:
        timers.append(reactor.callLater(timeout, stop, "TERM"))
    code, signal = yield done
    for timer in timers:
        if timer.active():
            timer.cancel()
    return {"exit": code, "signal": signal, "summary": summary_of(proto.stdout),
            "stderr": bytes(proto.stderr[-STDERR_TAIL:]).decode("utf-8", "replace"),
            "pid": proto.pid, "timed_out": bool(timed_out)}
