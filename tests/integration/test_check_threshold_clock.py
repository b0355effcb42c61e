"""`flud check` with real node processes: FLUD_NOW drives its rotation (a week
of daily checks in seconds), and --repair-below n restores full redundancy
at the first lost share, where the default threshold (n - 1) waits."""
import json
import os
import signal
import time

import pytest

from tests.integration.helpers import compare_trees, flud, init_client, output, write_random

pytestmark = pytest.mark.integration
DAY = 86400


def check(home, now, *extra):
    proc = flud("check", "--home", home, "--json", *extra, env={"FLUD_NOW": str(now)})
    assert proc.returncode in (0, 1), output(proc)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_flud_now_drives_the_rotation_and_a_threshold_of_n_repairs_one_lost_node(
        testnet_factory, tmp_path):
    net = testnet_factory(10)
    home = str(tmp_path / "home")
    init_client(home, net)
    src = tmp_path / "src"
    write_random(src / "big.bin", 12 * 1024 * 1024, seed=1)
    write_random(src / "notes.txt", 5000, seed=2)
    proc = flud("backup", str(src), "--home", home)
    assert proc.returncode == 0, output(proc)

    now = int(time.time())
    _, first = check(home, now)
    assert first["window"] == 1.0                    # no state yet: the whole cycle
    _, daily = check(home, now + DAY)
    assert daily["window"] == pytest.approx(1 / 7)   # a simulated day later: its seventh
    _, again = check(home, now + DAY)
    assert again["window"] == 0.0                    # the same day: nothing more is due

    # the busiest holder other than node 0 (the clients' way in) goes for good
    held = {i: row["stats"]["store"]["bytes_stored"]
            for i, row in enumerate(net.stats()) if i > 0 and row["stats"]}
    victim = max(held, key=held.get)
    assert held[victim] > 0
    net.stop(victim, signal.SIGKILL)

    code, lazy = check(home, now + 2 * DAY, "--repair", "--unreachable-grace", "0")
    assert code == 1 and lazy["counts"]["degraded"] > 0, lazy["counts"]
    assert lazy["recreated"]["shares"] == 0          # n - 1 healthy is not below n - 1
    code, full = check(home, now + 2 * DAY, "--repair", "--unreachable-grace", "0",
                       "--repair-below", "8")
    assert code == 0 and full["counts"]["repaired"] > 0, full["counts"]
    assert full["counts"]["degraded"] == full["counts"]["lost"] == 0
    assert full["recreated"]["bytes"] > 0 and full["fetched_bytes"] > 0
    code, after = check(home, now + 2 * DAY, "--unreachable-grace", "0")
    assert code == 0 and after["counts"]["degraded"] == 0, after["counts"]

    proc = flud("check", "--home", home, "--repair-below", "9")
    assert proc.returncode != 0 and "--repair-below 9" in proc.stderr, output(proc)

    out = tmp_path / "out"
    proc = flud("restore", "--home", home, "--to", str(out))
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, os.path.join(str(out), "src")) == []
