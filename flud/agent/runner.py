"""A job as a child process of the agent (Twisted glue).

`python -m flud JOB --home H --json`: a crash of the job cannot take the
agent down, its memory goes back to the OS when it exits, and the one JSON
object it prints on stdout is the record of the run. What the child prints
is kept bounded: stdout up to MAX_STDOUT, the tail of stderr.
"""
import json
import os

from twisted.internet import defer, protocol
from twisted.internet.error import ProcessExitedAlready

MAX_STDOUT = 1024 * 1024
STDERR_TAIL = 8 * 1024
KILL_AFTER = 30.0   # seconds between a timed-out job's SIGTERM and SIGKILL


class _JobProtocol(protocol.ProcessProtocol):
    def __init__(self, done: defer.Deferred):
        self.done = done
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.pid = None

    def connectionMade(self):
        self.pid = self.transport.pid
        self.transport.closeStdin()

    def outReceived(self, data):
        room = MAX_STDOUT - len(self.stdout)
        if room > 0:
            self.stdout += data[:room]

    def errReceived(self, data):
        self.stderr += data
        if len(self.stderr) > 2 * STDERR_TAIL:
            del self.stderr[:-STDERR_TAIL]

    def processEnded(self, reason):
        code = getattr(reason.value, "exitCode", None)
        signal = getattr(reason.value, "signal", None)
        self.done.callback((code, signal))


def summary_of(stdout: bytes):
    """The job's JSON summary: the last line of stdout that is a JSON object."""
    for line in reversed(bytes(stdout).splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


@defer.inlineCallbacks
def run_job(reactor, argv: list, env: dict = None, started=None, timeout: float = None):
    """Run argv; fires with {exit, signal, summary, stderr, pid, timed_out}.
    started(pid) is called once the child exists. A child still running
    after `timeout` seconds gets SIGTERM, and SIGKILL KILL_AFTER later."""
    done = defer.Deferred()
    proto = _JobProtocol(done)
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
