"""tools/check_load.py against a real 8-node testnet.

Each run is short (a few seconds). The testnets come from the shared
fixtures, which always stop them (`testnet down`, then SIGKILL by pid).
check_load itself runs in a subprocess with a hard timeout and its own
session; whatever it started is found by its work directory and killed if a
test leaves it behind.
"""
import json
import os
import random
import signal
import subprocess
import re
import sys
import threading
import time

import pytest

from tests.integration.helpers import (ROOT, is_alive, kill_all, processes_mentioning,
                                       wait_gone, wait_until)

CHECK_LOAD = os.path.join(ROOT, "tools", "check_load.py")
RUN_TIMEOUT = 120.0
ALL_OPS = ("retrieve", "store", "verify", "delete")
INTERVAL_ROW = re.compile(r"^\s+\d+\.\d+\s+(retrieve|store|verify|delete)\s")


def check_load_cmd(*args):
    return [sys.executable, CHECK_LOAD, *map(str, args)]


@pytest.fixture
def workdir(tmp_path):
    """check_load's work directory; any process still naming it is killed at the end."""
    path = tmp_path / "work"
    path.mkdir()
    yield str(path)
    left = processes_mentioning(str(path))
    kill_all(left)
    wait_gone(left, timeout=10)


def run_check_load(*args, timeout=RUN_TIMEOUT):
    proc = subprocess.run(check_load_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, stdin=subprocess.DEVNULL)
    return proc


def describe(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def assert_children_gone(doc, workdir):
    pids = [c["pid"] for c in doc["clients"]]
    assert pids, "no client process was reported"
    assert not [p for p in pids if is_alive(p)], f"client processes left: {pids}"
    assert not processes_mentioning(workdir), "a process still names the work directory"


# ---- pure parts (no processes) --------------------------------------------------

def test_specs_parse_and_draw():
    sys.path.insert(0, ROOT)
    from tools.loadgen.spec import SpecError, parse_mix, parse_size, parse_size_dist

    assert parse_mix("retrieve=80,store=20") == {"retrieve": 0.8, "store": 0.2}
    assert parse_mix("download=1,upload=1,verify=2") == {"retrieve": 0.25, "store": 0.25,
                                                         "verify": 0.5}
    assert parse_size("10k") == 10_000 and parse_size("1MB") == 10 ** 6
    assert parse_size("4MiB") == 4 << 20 and parse_size("128MB") == 128 * 10 ** 6
    for bad in ("x", "-1", "2GiB"):
        with pytest.raises(SpecError):
            parse_size(bad)
    with pytest.raises(SpecError):
        parse_mix("fetch=1")
    rng = random.Random(3)
    exp = parse_size_dist("exp:10k")
    sizes = [exp.draw(rng) for _ in range(20000)]
    assert 9000 < sum(sizes) / len(sizes) < 11000
    assert max(sizes) <= exp.max_size
    home = parse_size_dist("homemix")
    sizes = [home.draw(rng) for _ in range(51000)]
    assert min(sizes) >= 1 and max(sizes) < 10 ** 7
    between = sum(1 for s in sizes if 1000 <= s < 10000) / len(sizes)
    assert abs(between - 26 / 51) < 0.02


def test_reservoir_is_bounded_and_percentiles_weighted():
    sys.path.insert(0, ROOT)
    from tools.loadgen.stats import Merged, Reservoir, weighted_percentiles

    r = Reservoir(100, random.Random(1))
    for i in range(10000):
        r.add(i / 1e3, i / 1e3)
    assert len(r.lat) == 100 and r.seen == 10000
    assert weighted_percentiles([(range(100, 0, -1), 1)], (0.5, 0.99)) == [50, 99]
    m = Merged()
    m.add_samples(1000, [1.0] * 10, [1.0] * 10)   # 10 samples standing for 1000 ops
    m.add_samples(30, [9.0] * 30, [9.0] * 30)     # 30 samples standing for 30 ops
    p50, p99 = weighted_percentiles(m.lat, (0.5, 0.99))
    assert p50 == 1.0 and p99 == 9.0  # unweighted, the median would be 9.0


# ---- against a testnet ---------------------------------------------------------------

@pytest.fixture(scope="module")
def testnet8(module_testnet_factory):
    return module_testnet_factory(8, name="load8")


@pytest.mark.integration
def test_all_four_ops_are_measured(testnet8, workdir, tmp_path):
    out = tmp_path / "run.json"
    proc = run_check_load("--testnet", testnet8.dir, "--clients", 2, "--sessions", 3,
                          "--duration", 3, "--interval", 1, "--seed", 7,
                          "--mix", "retrieve=40,store=30,verify=20,delete=10",
                          "--size", "exp:10k", "--json", out, "--workdir", workdir)
    assert proc.returncode == 0, describe(proc)
    doc = json.loads(out.read_text())
    for op in ALL_OPS:
        s = doc["ops"][op]
        assert s["ops"] > 0, op
        assert s["ops_per_s"] > 0, op
        for dist in ("latency_s", "ttfb_s"):
            assert s[dist]["avg"] > 0 and s[dist]["p50"] > 0 and s[dist]["p99"] > 0, (op, dist)
            assert s[dist]["p50"] <= s[dist]["p99"]
        assert s["errors"] == 0, (op, s["errors_by_kind"])
    assert doc["ops"]["store"]["bytes_up"] > 0
    assert doc["ops"]["retrieve"]["bytes_down"] > 0
    # TTFB never exceeds the whole latency
    assert doc["ops"]["retrieve"]["ttfb_s"]["avg"] <= doc["ops"]["retrieve"]["latency_s"]["avg"]
    assert len(doc["intervals"]) >= 2
    assert len(doc["nodes"]) == 8
    assert all(n["alive_end"] and n["cpu_percent"] is not None and n["rss"] > 0
               for n in doc["nodes"])
    assert sum(n["requests"] for n in doc["nodes"]) > 0
    assert all(c["exit_code"] == 0 for c in doc["clients"]), doc["clients"]
    # the printed tables are there too
    assert "retrieve" in proc.stdout and "ttfb p99" in proc.stdout and "nodes" in proc.stdout
    assert_children_gone(doc, workdir)


@pytest.mark.integration
def test_op_budget_ends_the_run(testnet8, workdir, tmp_path):
    out = tmp_path / "ops.json"
    started = time.monotonic()
    proc = run_check_load("--testnet", testnet8.dir, "--clients", 2, "--sessions", 2,
                          "--ops", 300, "--size", "1KB", "--mix", "store=50,retrieve=50",
                          "--json", out, "--workdir", workdir)
    assert proc.returncode == 0, describe(proc)
    assert time.monotonic() - started < 60
    doc = json.loads(out.read_text())
    assert doc["total"]["ops"] + doc["total"]["errors"] == 300
    assert_children_gone(doc, workdir)


@pytest.mark.integration
def test_small_sweep(testnet8, workdir, tmp_path):
    out = tmp_path / "sweep.json"
    proc = run_check_load("--testnet", testnet8.dir, "--sweep", "--sweep-sizes", "100B,2MB",
                          "--sweep-sessions", "1,4", "--cell-duration", 0.7,
                          "--mem-cap", "6MB", "--json", out, "--workdir", workdir)
    assert proc.returncode == 0, describe(proc)
    doc = json.loads(out.read_text())
    cells = {(c["size"], c["sessions"]): c for c in doc["cells"]}
    assert set(cells) == {(100, 1), (100, 4), (2_000_000, 1), (2_000_000, 4)}
    assert "skipped" in cells[(2_000_000, 4)]          # 4 x 2 MB > 6 MB cap
    for key in ((100, 1), (100, 4), (2_000_000, 1)):
        c = cells[key]
        assert c["rps"] > 0 and c["ttfb_p99_s"] > 0 and c["write_ops"] > 0, c
        assert c["errors"] == 0, c["errors_by_kind"]
    assert "errors begin at" in proc.stdout and "TTFB p99 ms" in proc.stdout
    assert not processes_mentioning(workdir)


@pytest.mark.integration
def test_usage_errors_and_unreachable_nodes(workdir):
    proc = run_check_load("--nodes", "127.0.0.1:1", "--mix", "fetch=1", timeout=30)
    assert proc.returncode == 2 and "--mix" in proc.stderr
    proc = run_check_load("--nodes", "127.0.0.1:1", "--duration", 1, "--workdir", workdir,
                          timeout=60)
    assert proc.returncode == 3, describe(proc)
    assert "no" in proc.stderr.lower() and "node" in proc.stderr.lower()


@pytest.mark.integration
def test_a_node_killed_mid_run_is_counted_not_fatal(testnet_factory, workdir, tmp_path):
    net = testnet_factory(8, name="load8kill")
    out = tmp_path / "kill.json"
    proc = subprocess.Popen(
        check_load_cmd("--testnet", net.dir, "--clients", 2, "--sessions", 4, "--duration", 5,
                       "--interval", 1, "--mix", "retrieve=50,store=30,verify=10,delete=10",
                       "--size", "exp:4k", "--json", out, "--workdir", workdir),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # kill node 3 once the measured window has started: the first interval row
        wait_until(lambda: proc.poll() is not None or any(INTERVAL_ROW.match(l) for l in lines),
                   60, "check_load's first interval row")
        assert proc.poll() is None, "check_load ended early:\n" + "".join(lines)
        os.kill(net.nodes[3]["pid"], signal.SIGKILL)
        proc.wait(timeout=RUN_TIMEOUT)
        reader.join(timeout=10)
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    stdout = "".join(lines)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{stdout}\n{stderr}"
    doc = json.loads(out.read_text())
    kinds = {}
    for s in doc["ops"].values():
        for kind, n in s["errors_by_kind"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    assert sum(kinds.values()) > 0, "killing a node produced no error"
    assert set(kinds) <= {"CONNECTION_LOST", "CONNECT_FAILED", "TIMEOUT"}, kinds
    assert doc["ops"]["retrieve"]["ops"] > 0 and doc["ops"]["store"]["ops"] > 0
    row = doc["nodes"][3]
    assert row["alive_start"] and not row["alive_end"]
    assert sum(1 for n in doc["nodes"] if n["alive_end"]) == 7
    assert "errors by kind" in stdout and "CONNECT" in stdout
    assert_children_gone(doc, workdir)
