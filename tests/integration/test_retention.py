"""Retention with real node processes (issue 19): thirty simulated days of
daily backups of a generated tree that changes a tenth a day, each followed
by `forget --keep-daily 7 --keep-weekly 4 --prune` (the days are FLUD_NOW,
not sleeps); at the end every kept snapshot restores byte-identical and the
bytes on the nodes stay within a bound of what the kept snapshots reach.
And a backup killed half way leaves nothing behind once pruned."""
import json
import os
import re
import signal
import sys
import time

import pytest

from flud.client.records import unique_stored_bytes

from tests.integration.helpers import (ROOT, compare_trees, flud, flud_popen, init_client,
                                       manifest_of, output, write_random)

pytestmark = pytest.mark.integration

sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
from gen_tree import generate, mutate  # noqa: E402

NODES = 10
K, N = 4, 8
DAYS = 30
DAY = 86400
START = 1_767_225_600            # 2026-01-01 00:00 UTC: the simulated first day
FILES = 400


def _stored(net) -> int:
    return sum(row["stats"]["store"]["bytes_stored"] for row in net.stats() if row["stats"])


def _stored_and_garbage(net) -> tuple:
    """Bytes on the nodes, and of them the deleted members still in archives
    (each node compacts an owner's archive once they pass 20% of it)."""
    rows = [row["stats"]["store"] for row in net.stats() if row["stats"]]
    return sum(r["bytes_stored"] for r in rows), sum(r.get("garbage_bytes", 0) for r in rows)


def _at(day: int) -> dict:
    return {"FLUD_NOW": str(START + day * DAY + 3600), "TZ": "UTC"}


def test_thirty_days_of_backups_forget_and_prune(testnet_factory, tmp_path):
    net = testnet_factory(NODES)
    src = tmp_path / "home"
    generate(str(src), files=FILES, nbytes=FILES * 8000, seed=3)
    home = tmp_path / "client"
    init_client(home, net)
    with_policy = []
    for day in range(1, DAYS + 1):
        if day > 1:
            mutate(str(src), 3, day)
        env = _at(day)
        proc = flud("backup", src, "--home", home, env=env)
        assert proc.returncode in (0, 1), output(proc)
        proc = flud("forget", "--home", home, "--keep-daily", "7", "--keep-weekly", "4",
                    "--prune", "--grace", "0", "--max-unused", "20", env=env)
        assert proc.returncode == 0, output(proc)
        with_policy.append(_stored_and_garbage(net))
    listing = flud("ls", "--home", home, "--remote")
    kept = [int(line.split()[1]) for line in listing.stdout.splitlines()
            if line.startswith("snapshot")]
    # 7 dailies and the weekly snapshots before them (4 weeks, one of them among the dailies)
    assert 7 <= len(kept) <= 11 and kept[-1] == DAYS, output(listing)
    # the newest restores identical to the tree; every kept one restores whole
    for snapshot in kept:
        dest = tmp_path / f"restore-{snapshot}"
        proc = flud("restore", "--home", home, "--to", dest, "--snapshot", str(snapshot))
        assert proc.returncode == 0, output(proc)
        if snapshot == DAYS:
            assert compare_trees(src, dest / "home") == []
    # what the kept snapshots reach (files and records, each once), as the
    # last prune counted it: bytes in bundles, bytes in extents
    final = flud("prune", "--home", home, "--dry-run", "--grace", "0", env=_at(DAYS))
    m = re.search(r"reach (\d+) bytes in bundles .* and (\d+) bytes in extents", final.stdout)
    assert m, output(final)
    reached = int(m.group(1)) + int(m.group(2))
    files_only = unique_stored_bytes(manifest_of(home, snapshot)["contents"] for snapshot in kept)
    # a node compacts an owner's archive 2 s after its last DELETE (at most
    # 60 s after the first): the last day's figure, once that had its time
    deadline = time.monotonic() + 70
    stored, garbage = _stored_and_garbage(net)
    while garbage > 0.25 * (stored - garbage) and time.monotonic() < deadline:
        time.sleep(1)
        stored, garbage = _stored_and_garbage(net)
    report = {"days": DAYS, "kept": kept, "stored_and_garbage_by_day": with_policy,
              "reached": reached, "files_only": files_only,
              "ratio": stored / (N / K * reached),
              "ratio_without_garbage": (stored - garbage) / (N / K * reached)}
    print(json.dumps(report))
    (tmp_path / "retention.json").write_text(json.dumps(report))
    # What the client keeps (kept snapshots' bytes, bundles up to --max-unused
    # dead, what one more prune run will delete, records) within 1.25 n/k of
    # what they reach; and what the nodes have not compacted yet within their
    # threshold (an archive is compacted once a fifth of it is deleted members).
    assert stored - garbage <= 1.25 * N / K * reached, report
    assert garbage <= 0.25 * (stored - garbage), report


def test_a_backup_killed_half_way_leaves_nothing_once_pruned(testnet_factory, tmp_path):
    net = testnet_factory(NODES)
    src = tmp_path / "src"
    write_random(src / "small.txt", 1000, 1)
    home = tmp_path / "client"
    init_client(home, net)
    proc = flud("backup", src, "--home", home, env=_at(1))
    assert proc.returncode == 0, output(proc)
    baseline = _stored(net)
    for i in range(4):
        write_random(src / f"big-{i}.bin", 48 * 1024 * 1024, 10 + i)
    killed = flud_popen("backup", src, "--home", home, env=_at(2))
    deadline = time.monotonic() + 60
    while _stored(net) < baseline + 64 * 1024 * 1024 and time.monotonic() < deadline:
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    orphaned = _stored(net) - baseline
    assert orphaned > 32 * 1024 * 1024
    for i in range(4):
        os.unlink(src / f"big-{i}.bin")
    for day in (3, 4):
        proc = flud("prune", "--home", home, "--grace", "0", env=_at(day))
        assert proc.returncode == 0, output(proc)
    # What this home's index knew of is gone. An extent whose streams the
    # nodes committed just as the client died never reached the index: at
    # most one per large file in flight (3 x 32 MiB x n/k); the nodes' lease
    # expiry is what reclaims those.
    left = _stored(net) - baseline
    assert left <= 3 * 32 * 1024 * 1024 * 2 and left < orphaned / 2, (orphaned, left)
    proc = flud("backup", src, "--home", home, env=_at(5))
    assert proc.returncode == 0, output(proc)
    proc = flud("restore", "--home", home, "--to", tmp_path / "dest", env=_at(5))
    assert proc.returncode == 0, output(proc)
    assert compare_trees(src, tmp_path / "dest" / "src") == []
