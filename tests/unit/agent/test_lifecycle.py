"""Hooks, notifications, bandwidth windows and the battery pause around the
agent's jobs, on a task.Clock: the job processes and the hooks' shell are
fakes with run_job's signature, deliveries are recorded (no sockets)."""
import datetime

from twisted.internet import defer, task

from flud.agent import notify
from flud.agent.bandwidth import Window, limits_at, on_battery
from flud.agent.config import parse
from flud.agent.history import History
from flud.agent.jobs import command_line
from flud.agent.lifecycle import JobEvents
from flud.agent.notifier import Notifier
from flud.agent.service import Agent
from tests.unit.agent.test_service import FakeSpawn

DAY = 86400
BASE = ('[backup]\npaths = ["/data"]\nevery = "1d"\n[verify]\nenabled = false\n'
        '[check]\nenabled = false\n')


class FakeShell:
    """The hooks' process runner: records each command and its environment,
    answers with the exit code the test set for it."""

    def __init__(self, exits=None):
        self.exits = exits or {}
        self.calls = []

    def __call__(self, reactor, argv, env=None, timeout=None, started=None):
        command = argv[-1]
        self.calls.append((command, env, timeout))
        code = self.exits.get(command, 0)
        return defer.succeed({"exit": code, "signal": None, "summary": None,
                              "stderr": f"{command} said no" if code else "",
                              "timed_out": code == "timeout"})


class Deliveries:
    """run_in_thread for the Notifier: records (function name, args); fails
    while `failing` is set."""

    def __init__(self):
        self.sent = []
        self.failing = False

    def __call__(self, function, *args):
        self.sent.append((function.__name__, args))
        if self.failing:
            return defer.fail(RuntimeError("refused"))
        return defer.succeed(True)

    def pings(self):
        return [args[0] for name, args in self.sent if name == "deliver_ping"]


def make(tmp_path, text, shell=None, deliveries=None, battery=None):
    clock = task.Clock()
    clock.advance(1_000_000)
    config = parse(text)
    notifier = Notifier(clock, config.notify, str(tmp_path), host="box",
                        run_in_thread=deliveries or Deliveries())
    events = JobEvents(clock, str(tmp_path), config.hooks, notifier, spawn=shell or FakeShell())
    spawn = FakeSpawn()
    agent = Agent(clock, str(tmp_path), config, History(str(tmp_path)), spawn=spawn,
                  python="py", events=events, battery=battery)
    return agent, clock, spawn


PING = '[notify]\nping_url = "http://127.0.0.1:9/uuid"\nurls = ["json://127.0.0.1:9/"]\n'


def test_one_start_and_one_success_ping_per_backup(tmp_path):
    deliveries = Deliveries()
    agent, clock, spawn = make(tmp_path, BASE + PING, deliveries=deliveries)
    agent.start()
    assert deliveries.pings() == ["http://127.0.0.1:9/uuid/start"]
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 7})
    assert deliveries.pings() == ["http://127.0.0.1:9/uuid/start", "http://127.0.0.1:9/uuid"]
    # apprise gets failures and overdue notices by default, not successes
    assert [n for n, _ in deliveries.sent] == ["deliver_ping", "deliver_ping"]


def test_a_failure_pings_fail_with_the_error_and_the_log_tail(tmp_path):
    deliveries = Deliveries()
    agent, clock, spawn = make(tmp_path, BASE + PING, deliveries=deliveries)
    agent.start()
    log = "".join(f"line {i}\n" for i in range(100)) + "no node answered\n"
    spawn.finish({"command": "backup", "exit": 2,
                  "error": {"code": "NO_NODES", "message": "no node answered"}},
                 exit=2, stderr=log)
    fail = [args for name, args in deliveries.sent if name == "deliver_ping"][-1]
    assert fail[0] == "http://127.0.0.1:9/uuid/fail"
    assert "NO_NODES: no node answered" in fail[1] and "line 99" in fail[1]
    assert "line 80" not in fail[1]            # the tail: log_lines = 20
    (title, body) = [args[1:3] for name, args in deliveries.sent
                     if name == "deliver_apprise"][0]
    assert "FAILED" in title and "no node answered" in body


def test_the_overdue_notice_comes_once_then_on_its_own_schedule(tmp_path):
    deliveries = Deliveries()
    agent, clock, spawn = make(tmp_path, BASE + PING, deliveries=deliveries)
    agent.start()
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 1})
    clock.advance(4 * DAY)                    # the laptop slept four days
    notices = [args for name, args in deliveries.sent
               if name == "deliver_apprise" and "no successful backup" in args[1]]
    assert len(notices) == 1 and "4.0 days" in notices[0][1], notices
    spawn.finish({"command": "backup", "exit": 2,          # and no node answers
                  "error": {"code": "NO_NODES", "message": "none"}}, exit=2)
    clock.advance(30)                         # the next tick: nothing more
    assert len([a for n, a in deliveries.sent if "no successful backup" in str(a)]) == 1
    clock.advance(DAY)                        # overdue_repeat later: once more
    assert len([a for n, a in deliveries.sent if "no successful backup" in str(a)]) == 2
    # a restarted agent remembers when it last said so (agent-notify.json)
    again = Notifier(clock, parse(BASE + PING).notify, str(tmp_path), run_in_thread=deliveries)
    assert not again.check_overdue(clock.seconds() + 60, History(str(tmp_path)).read())


def test_a_success_ends_the_overdue_state():
    config = notify.NotifyConfig(overdue_after=3 * DAY, overdue_repeat=DAY)
    assert notify.overdue_due(10 * DAY, 6 * DAY, 0, None, config)
    assert not notify.overdue_due(10 * DAY, 8 * DAY, 0, 9 * DAY, config)
    assert notify.overdue_due(12 * DAY, 8 * DAY, 0, 7 * DAY, config)   # notice before success
    assert not notify.overdue_due(2 * DAY, None, 0, None, config)     # agent started 2 days ago


def test_deliveries_are_retried_a_bounded_number_of_times(tmp_path):
    deliveries = Deliveries()
    deliveries.failing = True
    clock = task.Clock()
    notifier = Notifier(clock, parse(BASE + PING).notify, run_in_thread=deliveries)
    (done, _) = notifier.send(notify.start_message("backup", "box"), "backup") + [None]
    results = []
    done.addCallback(results.append)
    for _ in range(20):
        clock.advance(60)
    assert len(deliveries.sent) == 4 and results == [False]   # 1 + retries (3)
    assert notifier.pending == 0


def test_an_essential_before_hook_that_fails_stops_the_backup(tmp_path):
    shell = FakeShell({"dump": 3})
    deliveries = Deliveries()
    hooks = '[hooks]\nbefore_backup = "dump"\non_error = "alert"\n'
    agent, clock, spawn = make(tmp_path, BASE + PING + hooks, shell, deliveries)
    agent.start()
    assert spawn.calls == []                                 # the backup did not run
    (record,) = History(str(tmp_path)).read()
    assert "before_backup hook failed (exit 3): dump said no" in record["error"]
    assert [c[0] for c in shell.calls] == ["dump", "alert"]
    env = shell.calls[1][1]
    assert env["FLUD_JOB"] == "backup" and "before_backup hook failed" in env["FLUD_ERROR"]
    assert deliveries.pings()[-1].endswith("/fail")


def test_an_optional_before_hook_that_fails_lets_the_backup_run(tmp_path):
    shell = FakeShell({"dump": 1})
    hooks = '[hooks]\nbefore_backup = { command = "dump", essential = false, timeout = "5s" }\n'
    agent, clock, spawn = make(tmp_path, BASE + hooks, shell)
    agent.start()
    assert len(spawn.calls) == 1 and shell.calls[0][2] == 5


def test_after_backup_sees_the_snapshot_and_exit_code_and_can_fail_the_run(tmp_path):
    shell = FakeShell({"unmount": 1})
    hooks = '[hooks]\nafter_backup = "unmount"\non_error = "alert"\n'
    agent, clock, spawn = make(tmp_path, BASE + hooks, shell)
    agent.start()
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 12})
    command, env, timeout = shell.calls[0]
    assert (command, env["FLUD_SNAPSHOT"], env["FLUD_EXIT_CODE"]) == ("unmount", "12", "0")
    assert "FLUD_PASSPHRASE" not in env and timeout == 600
    (record,) = History(str(tmp_path)).read()
    assert "after_backup hook failed" in record["error"]
    assert shell.calls[1][0] == "alert"


def test_bandwidth_windows_by_time_of_day(tmp_path):
    config = parse(BASE + '[limits]\nupload = "8M"\n'
                   '[[bandwidth]]\nfrom = "08:00"\nto = "18:00"\nupload = "1MiB/s"\n'
                   'download = "2M"\ndays = ["mon", "tue", "wed", "thu", "fri"]\n'
                   '[[bandwidth]]\nfrom = "22:00"\nto = "06:00"\nupload = 0\n')
    monday = datetime.datetime(2026, 11, 23)
    at = lambda day, hour: limits_at(config.bandwidth, config.upload, config.download,
                                     monday + datetime.timedelta(days=day, hours=hour))
    assert at(0, 9) == (1 << 20, 2 << 20)        # Monday 09:00
    assert at(0, 19) == (8 << 20, 0)            # outside: [limits]
    assert at(5, 9) == (8 << 20, 0)             # Saturday: the first window is weekdays
    assert at(0, 23) == (0, 0) and at(1, 3) == (0, 0)   # over midnight: no limit
    tz = datetime.timezone.utc
    noon = datetime.datetime(2026, 11, 23, 12, tzinfo=tz).timestamp()
    argv = command_line("backup", config, "/h", "py", moment=noon, tz=tz)
    assert argv[-6:-2] == ["--limit-upload", "1024", "--limit-download", "2048"]
    assert argv[-2] == "--limit-schedule"
    from flud.cli.main import build_parser     # the job's own parser takes what the agent passes
    parsed = build_parser().parse_args(argv[3:])
    assert (parsed.limit_upload, parsed.limit_schedule) == (1 << 20, argv[-1])
    # the job follows the windows while it runs: 17:59 -> 18:00 drops the day's limit
    from flud.cli.bandwidth import follow_schedule

    class Network:
        limits = []

        def set_limits(self, up, down):
            self.limits.append((up, down))
    clock = task.Clock()
    clock.advance(datetime.datetime(2026, 11, 23, 17, 59, 50, tzinfo=tz).timestamp())
    network = Network()
    loop = follow_schedule(clock, network, argv[-1], tz)
    clock.advance(30)
    loop.stop()
    assert network.limits == [(1 << 20, 2 << 20), (8 << 20, 0)]


def test_a_throttle_takes_a_new_rate_mid_run():
    from flud.protocol.ratelimit import Throttle
    clock = task.Clock()
    throttle = Throttle(clock, 1 << 20)
    woken = []
    assert throttle.charge(3 << 20, lambda: woken.append(clock.seconds()))
    throttle.set_rate(4 << 20)             # the debt (2 MiB) is paid at 4 MiB/s
    for _ in range(10):
        clock.advance(0.1)
    assert woken and 0.5 <= woken[0] <= 0.6


def test_no_job_starts_on_battery(tmp_path):
    class Battery:
        power_plugged = False
    state = {"battery": Battery()}
    probe = lambda: state["battery"]
    agent, clock, spawn = make(tmp_path, BASE + '[power]\npause_on_battery = true\n',
                               battery=probe)
    agent.start()
    clock.advance(600)
    assert spawn.calls == [] and "battery" in agent.paused
    state["battery"] = None                       # plugged in (or no battery at all)
    clock.advance(30)
    assert len(spawn.calls) == 1 and agent.paused is None
    assert on_battery(lambda: None) is False
    assert Window((22, 0), (6, 0)).holds(datetime.datetime(2026, 11, 23, 5))


def test_the_overdue_notice_says_why_no_backup_runs_and_bad_urls_are_named(tmp_path):
    from flud.agent.lifecycle import job_events
    from flud.agent.notifier import unknown_urls
    config = parse('[backup]\npaths = []\n' + PING)        # no paths: the agent runs none
    clock = task.Clock()
    events = job_events(clock, str(tmp_path), config)
    deliveries = Deliveries()
    events.notifier._run_in_thread = deliveries
    clock.advance(3 * DAY)
    events.tick(clock.seconds(), [])
    (notice,) = [args for name, args in deliveries.sent if name == "deliver_apprise"]
    assert "runs no backup: no paths to back up: set [backup] paths" in notice[2]
    assert unknown_urls(["json://127.0.0.1:9/", "bogus://x"]) == [2]


def test_a_backup_that_skipped_a_socket_is_a_success_with_warnings(tmp_path):
    deliveries = Deliveries()
    agent, clock, spawn = make(tmp_path, BASE + PING.replace("urls", 'events = ["success"]\nurls'),
                               deliveries=deliveries)
    agent.start()
    spawn.finish({"command": "backup", "exit": 1, "snapshot": 3, "skipped": 1}, exit=1,
                 stderr="skipped /home/me/.gnupg/S.gpg-agent: a socket\n")
    assert deliveries.pings()[-1] == "http://127.0.0.1:9/uuid"       # not /fail
    (title, body) = [args[1:3] for name, args in deliveries.sent if name == "deliver_apprise"][0]
    assert title.endswith("backup succeeded with warnings") and "S.gpg-agent" in body
    assert notify.last_success(History(str(tmp_path)).read()) is not None
    assert not notify.succeeded({"job": "verify", "exit": 1, "summary": {}})


def test_a_busy_home_postpones_the_backup_before_its_hook_runs(tmp_path):
    from flud.agent.lock import HomeLock
    from flud.agent.service import BUSY_RETRY
    shell = FakeShell()
    deliveries = Deliveries()
    hooks = '[hooks]\nbefore_backup = "snapshot-and-mount"\n'
    agent, clock, spawn = make(tmp_path, BASE + PING + hooks, shell, deliveries)
    by_hand = HomeLock(str(tmp_path))
    by_hand.acquire()                          # a `flud backup` by hand holds the home
    agent.start()
    assert shell.calls == [] and spawn.calls == [] and deliveries.sent == []
    assert History(str(tmp_path)).read() == []   # postponed, not a run
    by_hand.release()
    clock.advance(BUSY_RETRY + 1)
    assert [c[0] for c in shell.calls] == ["snapshot-and-mount"] and len(spawn.calls) == 1
    assert deliveries.pings() == ["http://127.0.0.1:9/uuid/start"]
