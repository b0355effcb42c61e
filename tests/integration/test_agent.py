"""The agent and the client jobs it runs, with real node processes: a
scheduled backup seen on /api/status, one agent per home, the job lock
between a job and a `flud` command, --json summaries, a broken agent.toml,
and rate limits that make a backup and a restore take about size/limit."""
import json
import os
import subprocess
import sys

import pytest

from tests.integration.agent_helpers import AgentProcess, configure
from tests.integration.helpers import ROOT, flud, init_client, output, write_random

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
K, N, NODES = 2, 4, 6   # a bundle of small files needs n + 2 nodes


@pytest.fixture(scope="module")
def net(module_testnet_factory):
    return module_testnet_factory(NODES, "agent-net")


@pytest.fixture
def home(net, tmp_path):
    path = tmp_path / "home"
    proc = init_client(str(path), net, None, "--k", str(K), "--n", str(N))
    assert "agent.toml" in proc.stdout
    return path


def json_of(proc) -> dict:
    """The summary of a --json command: its last line (docs/json.md); every
    line before it a status or error line."""
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert lines and lines[-1]["type"] == "summary", output(proc)
    assert all(line["type"] in ("status", "error") for line in lines[:-1]), output(proc)
    return lines[-1]


def test_the_agent_backs_up_on_schedule_and_refuses_a_twin(home, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    write_random(data / "big", MIB + 3, seed=1)
    configure(home, [data])
    agent = AgentProcess(home)
    try:
        agent.wait_ready()
        last = agent.wait_for_run("backup")
        assert last["exit"] == 0, agent.output()
        status = agent.status()
        assert [s["files"] for s in status["snapshots"]] == [2], status
        verify = agent.wait_for_run("verify")
        assert verify["exit"] == 0 and "0 missing" in verify["line"], agent.output()
        check = agent.wait_for_run("check")
        assert check["exit"] == 0, agent.output()
        status = agent.status()
        health = status["health"]
        assert health["objects"]["healthy"] > 0, status
        assert health["objects"]["degraded"] == health["objects"]["lost"] == 0
        # the holders of shares: at least n of the testnet's nodes, all reachable
        assert N <= len(health["nodes"]) <= NODES
        assert all(n["reachable"] for n in health["nodes"])
        page = agent.page()
        assert f"{health['objects']['healthy']} healthy" in page
        assert "snapshot 1: 2 files" in page
        # the backup renewed the leases first: until when the nodes keep the data
        assert status["leases"]["kept_until"] - status["leases"]["renewed"] == 365 * 86400
        assert 'id="leases">the nodes keep this home' in page
        # a second agent on the same home
        twin = flud("agent", "--home", home, "--listen", "127.0.0.1:0", timeout=30)
        assert twin.returncode == 2
        assert f"an agent is already running on {home} (pid {agent.popen.pid})" in twin.stderr
        with open(os.path.join(home, "agent-history.jsonl")) as f:
            jobs = [json.loads(line)["job"] for line in f]
        assert jobs == ["backup", "verify", "check"]
    finally:
        agent.stop()


HOLD = """
import sys, time
from flud.agent.lock import HomeLock
HomeLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_job_refuses_while_another_holds_the_home(home, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = flud("backup", tmp_path, "--home", home, "--json")
        assert proc.returncode == 2, output(proc)
        result = json_of(proc)
        assert result["error"]["code"] == "HOME_BUSY"
        assert f"another job is running on this home (pid {holder.pid})" in proc.stderr
    finally:
        holder.kill()
        holder.wait()


def test_json_summaries_of_backup_ls_verify_restore(home, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "<odd> name").write_text("x" * 100)
    backup = json_of(flud("backup", data, "--home", home, "--json"))
    assert backup["command"] == "backup" and backup["exit"] == 0 and backup["files"] == 1
    listing = json_of(flud("ls", "--home", home, "--json"))
    assert [s["id"] for s in listing["snapshots"]] == [backup["snapshot"]]
    files = json_of(flud("ls", "--home", home, "--json", "--snapshot", backup["snapshot"]))
    assert any(e["path"].endswith("<odd> name") for e in files["entries"])
    verify = json_of(flud("verify", "--home", home, "--json"))
    assert verify["totals"]["missing"] == 0 and verify["totals"]["confirmed"] > 0
    restore = json_of(flud("restore", "--home", home, "--to", tmp_path / "back", "--json"))
    assert restore["exit"] == 0 and restore["files"] == 1


def test_a_broken_agent_toml_is_named_with_its_line(home):
    path = os.path.join(home, "agent.toml")
    with open(path) as f:
        good = f.read()
    lines = good.splitlines()
    number = lines.index("[verify]") + 3    # enabled, then every
    assert lines[number - 1].startswith("every =")
    lines[number - 1] = 'every = "often"'
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    proc = flud("agent", "--home", home, timeout=30)
    assert proc.returncode == 2
    assert f"agent.toml: line {number}: [verify] every: expected an interval" in proc.stderr, \
        proc.stderr
    with open(path, "w") as f:
        f.write(good + "\n[backup]\n")       # a section declared twice: a TOML error
    proc = flud("agent", "--home", home, timeout=30)
    assert proc.returncode == 2
    assert f"agent.toml: line {len(good.splitlines()) + 2}, column" in proc.stderr, proc.stderr
    with open(path, "w") as f:
        f.write(good)
    proc = flud("agent", "--home", home, "--listen", "10.1.2.3:80", timeout=30)
    assert proc.returncode == 2 and "loopback" in proc.stderr


def test_rate_limits_make_a_backup_and_a_restore_take_about_size_over_limit(home, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    size = 2 * MIB
    write_random(data / "big", size, seed=7)
    limit = 1 * MIB
    backup = json_of(flud("backup", data, "--home", home, "--json", "--limit-upload", "1M"))
    assert backup["exit"] == 0
    # n/k times the file goes up; the first second's worth is the bucket's burst
    sent = backup["bytes_sent"]
    expected = (sent - limit) / limit
    assert sent >= size * N / K
    assert 0.8 * expected <= backup["elapsed"] <= expected + 10, (backup["elapsed"], expected)
    restore = json_of(flud("restore", "--home", home, "--to", tmp_path / "back", "--json",
                           "--limit-download", "512K"))
    assert restore["exit"] == 0
    expected = (size - 512 * 1024) / (512 * 1024)
    assert 0.8 * expected <= restore["elapsed"] <= expected + 10, (restore["elapsed"], expected)
    (restored,) = [os.path.join(d, "big") for d, _, files in os.walk(tmp_path / "back")
                   if "big" in files]
    with open(restored, "rb") as f, open(data / "big", "rb") as g:
        assert f.read() == g.read()
