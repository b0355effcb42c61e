"""A job as a child process: its JSON summary read off stdout, a job past
its timeout stopped. A real reactor is not run here: the process is a fake
(MemoryReactor's spawnProcess records it; the test plays its end)."""
from twisted.internet import error
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from flud.agent.runner import KILL_AFTER, run_job, summary_of


class FakeProcess:
    pid = 99

    def __init__(self):
        self.signals = []

    def signalProcess(self, name):
        self.signals.append(name)


class Reactor(MemoryReactorClock):
    def spawnProcess(self, proto, executable, args, env=None, **kw):
        self.spawned = (proto, args, env)
        self.process = FakeProcess()
        proto.transport = self.process
        return self.process


def end(proto, code):
    proto.processEnded(Failure(error.ProcessTerminated(exitCode=code) if code
                               else error.ProcessDone(0)))


def test_the_summary_is_the_last_json_object_on_stdout():
    assert summary_of(b'noise\n{"a": 1}\n[1]\nnot json\n') == {"a": 1}
    assert summary_of(b"nothing\n") is None


def test_a_run_reports_exit_summary_and_stderr_tail_and_drops_the_passphrase():
    reactor = Reactor()
    results = []
    d = run_job(reactor, ["py", "-m", "flud", "verify"], env={"FLUD_PASSPHRASE": "x", "A": "1"},
                started=results.append)
    d.addCallback(results.append)
    proto, args, env = reactor.spawned
    assert "FLUD_PASSPHRASE" not in env and env["A"] == "1"
    proto.outReceived(b'progress\n{"command": "verify", "exit": 0}\n')
    proto.errReceived(b"x" * 100_000)
    end(proto, 0)
    pid, result = results
    assert pid == 99 and result["exit"] == 0 and result["summary"]["command"] == "verify"
    assert len(result["stderr"]) <= 8 * 1024 and not result["timed_out"]


def test_a_job_past_its_timeout_gets_term_then_kill():
    reactor = Reactor()
    results = []
    run_job(reactor, ["py"], env={}, timeout=60).addCallback(results.append)
    reactor.advance(59)
    assert reactor.process.signals == []
    reactor.advance(1)
    assert reactor.process.signals == ["TERM"]
    reactor.advance(KILL_AFTER)
    assert reactor.process.signals == ["TERM", "KILL"]
    end(reactor.spawned[0], 1)
    assert results[0]["timed_out"] and not reactor.getDelayedCalls()
