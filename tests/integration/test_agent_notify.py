"""Notifications and hooks of a real `flud agent` process, against a local
HTTP server on 127.0.0.1: one start and one success ping per backup (and
apprise's JSON notice), hooks that see the snapshot id and exit code, and
one failure ping carrying the error when no node answers."""
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.integration.agent_helpers import AgentProcess
from tests.integration.helpers import flud, init_client, output, wait_until

pytestmark = pytest.mark.integration

K, N, NODES = 1, 2, 4   # a bundle of small files needs n + 2 nodes


class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        self.server.requests.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def agent_toml(home, data, server, hooks_dir, apprise=True) -> None:
    port = server.server_address[1]
    urls = f'urls = ["json://127.0.0.1:{port}/apprise"]' if apprise else ""
    text = f"""
[backup]
paths = [{json.dumps(str(data))}]
every = "1d"
[verify]
enabled = false
[check]
enabled = false
[notify]
ping_url = "http://127.0.0.1:{port}/ping/uuid"
{urls}
events = ["success", "failure"]
retries = 1
[hooks]
before_backup = 'echo "$FLUD_JOB" > {hooks_dir}/before'
after_backup = 'echo "$FLUD_SNAPSHOT $FLUD_EXIT_CODE" > {hooks_dir}/after'
on_error = 'printf "%s|%s" "$FLUD_EXIT_CODE" "$FLUD_ERROR" > {hooks_dir}/error'
timeout = "30s"
"""
    with open(os.path.join(home, "agent.toml"), "w") as f:
        f.write(text)


def paths(server, prefix):
    return [path for path, _ in server.requests if path.startswith(prefix)]


def run_agent_until(home, server, last_ping, apprise=True):
    agent = AgentProcess(home)
    try:
        agent.wait_ready()
        run = agent.wait_for_run("backup", timeout=60)
        wait_until(lambda: last_ping in paths(server, "/ping")
                   and (paths(server, "/apprise") or not apprise),
                   20, "the pings and the notice", interval=0.1)
    finally:
        agent.stop()
    return run, agent


def test_one_start_and_one_success_ping_per_backup_and_hooks_see_the_snapshot(
        testnet_factory, server, tmp_path):
    net = testnet_factory(NODES)
    home = str(tmp_path / "home")
    init_client(home, net, None, "--k", str(K), "--n", str(N))
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    agent_toml(home, data, server, tmp_path)
    run, agent = run_agent_until(home, server, "/ping/uuid")
    assert run["exit"] == 0, agent.output()
    assert paths(server, "/ping") == ["/ping/uuid/start", "/ping/uuid"], server.requests
    (notice,) = [json.loads(body) for path, body in server.requests if path == "/apprise"]
    assert "backup succeeded" in notice["title"], notice
    snapshot = json.loads(flud("ls", "--home", home, "--json").stdout)["snapshots"][0]["id"]
    assert (tmp_path / "before").read_text() == "backup\n"
    assert (tmp_path / "after").read_text() == f"{snapshot} 0\n"
    assert not (tmp_path / "error").exists()


def test_one_failure_ping_with_the_error_when_no_node_answers(server, tmp_path):
    with socket.socket() as probe:          # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = str(tmp_path / "home")
    proc = flud("init", "--home", home, "--join", f"127.0.0.1:{port}")
    assert proc.returncode == 0, output(proc)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    agent_toml(home, data, server, tmp_path, apprise=False)   # apprise: the test above
    run, agent = run_agent_until(home, server, "/ping/uuid/fail", apprise=False)
    assert run["exit"] == 2, agent.output()
    assert "hooks: after_backup, before_backup, on_error" in agent.output()
    assert paths(server, "/ping") == ["/ping/uuid/start", "/ping/uuid/fail"], server.requests
    (fail,) = [body for path, body in server.requests if path == "/ping/uuid/fail"]
    assert "no node answered" in fail and "NOT_ENOUGH_NODES" in fail, fail
    code, error = (tmp_path / "error").read_text().split("|", 1)
    assert code == "2" and "no node answered" in error
    assert not (tmp_path / "after").exists()


def test_one_overdue_notice_after_a_four_day_gap_and_none_on_the_next_tick(server, tmp_path):
    """The agent's loop on an injected clock; the deliveries are the real
    ones (HTTP to the local server), run in this thread instead of the pool."""
    from twisted.internet import defer, task

    from flud.agent.config import parse
    from flud.agent.history import History
    from flud.agent.lifecycle import JobEvents
    from flud.agent.notifier import Notifier
    from flud.agent.service import Agent
    from tests.unit.agent.test_service import FakeSpawn

    def in_this_thread(function, *args):
        return defer.maybeDeferred(function, *args)

    port = server.server_address[1]
    config = parse(f'[backup]\npaths = ["/data"]\nevery = "1d"\n[verify]\nenabled = false\n'
                   f'[check]\nenabled = false\n[notify]\n'
                   f'ping_url = "http://127.0.0.1:{port}/ping/uuid"\n'
                   f'urls = ["json://127.0.0.1:{port}/apprise"]\n')
    clock = task.Clock()
    clock.advance(1_000_000)
    notifier = Notifier(clock, config.notify, str(tmp_path), run_in_thread=in_this_thread)
    spawn = FakeSpawn()
    agent = Agent(clock, str(tmp_path), config, History(str(tmp_path)), spawn=spawn,
                  python="py", events=JobEvents(clock, str(tmp_path), {}, notifier))
    agent.start()
    spawn.finish({"command": "backup", "exit": 0, "snapshot": 1})
    assert paths(server, "/ping") == ["/ping/uuid/start", "/ping/uuid"]
    clock.advance(4 * 86400)                  # asleep four days; the due backup fails
    spawn.finish({"command": "backup", "exit": 2,
                  "error": {"code": "NOT_ENOUGH_NODES", "message": "no node answered"}}, exit=2)
    clock.advance(30)                         # the next tick
    notices = [json.loads(body)["title"] for path, body in server.requests
               if path == "/apprise" and "no successful backup" in body]
    assert notices == [f"flud on {socket.gethostname()}: no successful backup for 4.0 days"]
    assert paths(server, "/ping")[2:] == ["/ping/uuid/start", "/ping/uuid/fail"]
    agent.stop()


def test_a_test_notification_reaches_every_destination(server, capsys):
    """`flud agent --test-notifications`, its work in this process."""
    from flud.agent.config import parse
    from flud.cli.notify_test import test_notifications

    port = server.server_address[1]
    config = parse(f'[notify]\nping_url = "http://127.0.0.1:{port}/ping/uuid"\n'
                   f'urls = ["json://127.0.0.1:{port}/apprise"]\n')
    assert test_notifications(config) == 0, capsys.readouterr()
    assert [path for path, _ in server.requests] == ["/ping/uuid/log", "/apprise"]
    assert "test notification" in json.loads(server.requests[1][1])["title"]
    config = parse('[notify]\nping_url = "http://127.0.0.1:9/nobody"\n')
    assert test_notifications(config) == 2
    assert "FAILED" in capsys.readouterr().out
