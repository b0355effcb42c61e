"""The agent's loop on a task.Clock with a fake process spawner: jobs one at a
time, each run recorded, a busy home postponed, a crashed job recorded."""
from twisted.internet import defer, task

from flud.agent.config import parse
from flud.agent.history import History
from flud.agent.service import BUSY_RETRY, Agent

CONFIG = ('[backup]\npaths = ["/data"]\nevery = "1h"\n[verify]\nevery = "1d"\n'
          '[check]\nenabled = false\n')


class FakeSpawn:
    """Records argv; each job waits until the test finishes it."""

    def __init__(self):
        self.calls = []     # [argv, Deferred]

    def __call__(self, reactor, argv, started=None, timeout=None, on_line=None):
        self.timeout = timeout
        self.on_line = on_line
        d = defer.Deferred()
        if argv[3] == "ls":   # the snapshot list: answered at once
            return defer.succeed({"exit": 0, "summary": {"snapshots": [{"id": 1}]}})
        self.calls.append([argv, d])
        if started:
            started(4242)
        return d

    def finish(self, summary, exit=0, stderr="", timed_out=False):
        argv, d = self.calls[-1]
        d.callback({"exit": exit, "signal": None, "summary": summary, "stderr": stderr,
                    "timed_out": timed_out})


def make(tmp_path, text=CONFIG, clock=None):
    clock = clock or task.Clock()
    clock.advance(1_000_000)
    spawn = FakeSpawn()
    agent = Agent(clock, str(tmp_path), parse(text), History(str(tmp_path)), spawn=spawn,
                  python="py")
    return agent, clock, spawn


def test_jobs_run_one_at_a_time_and_each_run_is_recorded(tmp_path):
    agent, clock, spawn = make(tmp_path)
    agent.start()
    assert [c[0][3] for c in spawn.calls] == ["backup"]
    assert agent.status()["running"] == {"job": "backup", "start": 1_000_000, "pid": 4242,
                                         "progress": None}
    clock.advance(120)
    assert len(spawn.calls) == 1           # verify waits for the backup
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 1, "files": 2,
                  "bytes_sent": 500})
    assert [c[0][3] for c in spawn.calls] == ["backup", "verify"]
    spawn.finish({"command": "verify", "exit": 0, "totals": {"confirmed": 8}})
    records = History(str(tmp_path)).read()
    assert [(r["job"], r["exit"]) for r in records] == [("backup", 0), ("verify", 0)]
    status = agent.status()
    assert status["snapshots"] == [{"id": 1}]
    assert status["running"] is None
    backup = [j for j in status["jobs"] if j["name"] == "backup"][0]
    assert backup["next"] == 1_000_000 + 3600
    clock.advance(3600)
    assert [c[0][3] for c in spawn.calls][-1] == "backup"


def test_a_busy_home_postpones_the_job_without_counting_a_run(tmp_path):
    agent, clock, spawn = make(tmp_path)
    agent.start()
    spawn.finish({"command": "backup", "exit": 2,
                  "error": {"code": "HOME_BUSY", "message": "another job (pid 7)"}}, exit=2)
    assert History(str(tmp_path)).read() == []
    assert [c[0][3] for c in spawn.calls] == ["backup", "verify"]
    spawn.finish({"command": "verify", "exit": 0, "totals": {}})
    clock.advance(BUSY_RETRY - 1)
    assert len(spawn.calls) == 2
    clock.advance(31)
    assert [c[0][3] for c in spawn.calls][-1] == "backup"


def test_a_job_that_dies_without_a_summary_is_recorded_as_failed(tmp_path):
    agent, clock, spawn = make(tmp_path)
    agent.start()
    spawn.finish(None, exit=-9, stderr="Traceback...\nMemoryError\n")
    (record,) = History(str(tmp_path)).read()
    assert record["exit"] == -9 and "MemoryError" in record["error"]
    log = agent.status()["log"]
    assert log[0]["line"].startswith("failed: exit -9")
    assert len(spawn.calls) == 2   # the agent went on with the next job


def test_a_restarted_agent_remembers_the_last_runs(tmp_path):
    agent, clock, spawn = make(tmp_path)
    agent.start()
    spawn.finish({"command": "backup", "exit": 0, "bytes_sent": 1})
    spawn.finish({"command": "verify", "exit": 0, "totals": {}})
    agent.stop()
    assert agent.idle.called
    again = Agent(clock, str(tmp_path), parse(CONFIG), History(str(tmp_path)),
                  spawn=spawn, python="py")
    again.start()
    assert len(spawn.calls) == 2   # nothing due: the backup ran less than an hour ago
    again.stop()


def test_a_job_past_its_timeout_is_recorded_as_stopped(tmp_path):
    agent, clock, spawn = make(tmp_path, CONFIG + '[agent]\njob_timeout = "2h"\n')
    agent.start()
    assert spawn.timeout == 7200
    spawn.finish(None, exit=None, timed_out=True)
    (record,) = History(str(tmp_path)).read()
    assert "job_timeout" in record["error"]
