"""Simulated days for the retention benches (bench_retention.py, bench_prune.py).

- A generated tree (gen_tree.generate) is made once under run/bench/data and kept, with
  a stamp beside it; each run works on its own copy (copy_tree), since gen_tree.mutate
  changes a tree in place and every run must start from the same day-1 tree.
- The client's clock at a day: FLUD_NOW (unix seconds) fixes the snapshot time and
  forget's and prune's present, so thirty days pass without sleeping; TZ=UTC makes
  forget's calendar days the same on every machine.
- What the client prints that these benches read: `flud ls --remote`'s snapshot ids,
  prune's lines (what the kept snapshots reach, what it deleted, its memory line), and
  the unique stored bytes of a set of snapshots' files (tools/snapshot_json.py per
  snapshot, each content's stored length counted once).
"""
from __future__ import annotations

import json
import os
import shutil
import time

import common
from common import BenchError, log
from flud.client import records
from gen_tree import VERSION as TREE_VERSION
from gen_tree import generate

DAY = 86400
START = 1_767_225_600  # 2026-01-01 00:00 UTC: the simulated first day
SNAPSHOT_JSON = os.path.join(common.ROOT, "tools", "snapshot_json.py")
TIMEOUT = 6 * 3600


def kept_tree(files: int, nbytes: int | None, seed: int) -> tuple:
    """(path, summary) of the generated tree, made once and kept for later runs."""
    label = f"tree{TREE_VERSION}-{files}-{nbytes or 'auto'}-{seed}"
    tree = os.path.join(common.RUN_DIR, "data", label)
    stamp = tree + ".json"
    if os.path.isdir(tree) and os.path.exists(stamp):
        with open(stamp) as f:
            return tree, json.load(f)
    shutil.rmtree(tree, ignore_errors=True)
    log(f"generating {files:,} files (seed {seed}) in {tree}")
    summary = generate(tree, files, nbytes, seed, quiet=True)
    with open(stamp, "w") as f:
        json.dump(summary, f, indent=1)
    return tree, summary


def copy_tree(source: str, dest: str) -> str:
    """A working copy with the same bytes, modes, mtimes and symlinks (so the first
    backup of every copy sees the same tree)."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copytree(source, dest, symlinks=True)
    return dest


def env_at(day: int, hour: int = 1) -> dict:
    """The environment of a client command run on simulated day `day` (1, 2, ...)."""
    return dict(os.environ, FLUD_NOW=str(START + (day - 1) * DAY + hour * 3600), TZ="UTC")


def node_bytes(tn) -> tuple:
    """(bytes stored, of which archive garbage) summed over a testnet's nodes' STATS:
    a member deleted from an archive keeps its bytes until the archive is compacted."""
    stores = [s["store"] for s in tn.stats() if s]
    return (sum(s["bytes_stored"] for s in stores),
            sum(s.get("garbage_bytes", 0) for s in stores))


def settled_bytes(tn, ratio: float = 0.25, timeout: float = 70) -> tuple:
    """node_bytes once the nodes had their time to compact: a node compacts an owner's
    archive a few seconds after its last DELETE (at most a minute after the first), so
    wait while the garbage is above `ratio` of the live bytes, at most `timeout` s."""
    deadline = time.monotonic() + timeout
    stored, garbage = node_bytes(tn)
    while garbage > ratio * (stored - garbage) and time.monotonic() < deadline:
        time.sleep(1)
        stored, garbage = node_bytes(tn)
    return stored, garbage


def remote_snapshots(home: str, env: dict | None = None) -> list:
    """The snapshot ids the nodes hold (`flud ls --remote --json`), oldest first."""
    r = common.flud("ls", "--home", home, "--remote", "--json", timeout=600, env=env)
    r.check("flud ls --remote")
    return [s["id"] for s in common.summary_record(r.stdout, "ls").get("snapshots", [])]


parse_prune = common.parse_prune   # (its callers' name)


def snapshot_json(home: str, snapshot: int) -> dict:
    """One snapshot in the version-1 manifest's shape, read from the nodes."""
    r = common.run([common.PY, SNAPSHOT_JSON, "--home", home, "--snapshot", str(snapshot)],
                   timeout=TIMEOUT)
    if r.rc != 0 or not r.stdout.strip():
        raise BenchError(f"snapshot_json of snapshot {snapshot} exited {r.rc}: "
                         f"{r.stderr[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def unique_stored_bytes(home: str, snapshots) -> int:
    """The stored (compressed, encrypted) bytes the files of these snapshots take, each
    content once: a small file's stored length, a large file's segment lengths."""
    return records.unique_stored_bytes(snapshot_json(home, snapshot)["contents"]
                                       for snapshot in snapshots)