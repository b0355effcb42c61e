"""Faults a real network delivers, with real node processes (issue 16).

- several large files uploading at once, and a folder of many photo-sized
  files: no upload is ever refused as not matching its key (HASH_MISMATCH),
  and no healthy node is marked failed;
- a holder stalled (SIGSTOP: the connection stays open, nothing answers)
  before a restore, during a restore and during a backup: the command ends in
  bounded time (against the same command with every node up) and its output
  is byte-identical;
- a node killed in the middle of a STORE; a node whose capacity is spent;
  too few nodes with room left.

One 10-node testnet is shared by the module. A test that stops a node brings
it back (SIGCONT, or a restart on the same home and port) before it ends, so
the order of the tests does not matter. Every command runs in its own
session with a hard time limit and is killed by its pid when it overruns.
"""
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter

import pytest

from tests.integration.helpers import (NodeProcess, compare_trees, flud_popen, init_client,
                                       is_alive, manifest_of, tool, wait_until, write_random)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
NODES = 10
K, N = 4, 8
SLACK = 15.0          # seconds a stalled node may add, over twice the all-up time
OVERRUN = 30.0        # how far past its bound a command may run before it is killed

MISMATCH = re.compile(r"HASH_MISMATCH|hash_mismatch|uploaded data does not match", re.I)
FAILED = re.compile(r"node ([0-9a-f]{6,}) failed; using others")


# ---- commands and what their output says ------------------------------------------------

class Run:
    """One flud command's outcome: exit code, output, wall time, overran."""

    def __init__(self, args, returncode, stdout, stderr, elapsed, overran):
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed
        self.overran = overran

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    def mismatches(self) -> list:
        return [line for line in self.text.splitlines() if MISMATCH.search(line)]

    def failed_nodes(self) -> set:
        """12-hex prefixes of the nodes the client marked failed."""
        return {m.group(1)[:12] for m in FAILED.finditer(self.text)}

    def __str__(self) -> str:
        how = f"killed after {self.elapsed:.1f} s" if self.overran else \
            f"{self.elapsed:.1f} s"
        return (f"flud {' '.join(map(str, self.args[:2]))}: exit {self.returncode}, {how}\n"
                f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-6000:]}")


def start(*args):
    return flud_popen(*args), time.monotonic(), args


def finish(started, limit=None) -> Run:
    """Wait for a command from start(); past `limit` s it is SIGKILLed (by pid)."""
    popen, t0, args = started
    limit = limit or 600.0
    try:
        stdout, stderr = popen.communicate(timeout=max(limit - (time.monotonic() - t0), 0.1))
        overran = False
    except subprocess.TimeoutExpired:
        popen.kill()
        stdout, stderr = popen.communicate(timeout=30)
        overran = True
    return Run(args, popen.returncode, stdout, stderr, time.monotonic() - t0, overran)


def run(*args, limit=None) -> Run:
    return finish(start(*args), limit)


def assert_clean(result: Run, may_fail=()):
    """Exit 0, no upload refused as not matching its key, no node marked
    failed but those in may_fail (12-hex prefixes)."""
    assert not result.overran and result.returncode == 0, str(result)
    assert result.mismatches() == [], "uploads refused as not matching their keys:\n" + \
        "\n".join(result.mismatches()[:10]) + f"\n\n{result}"
    wrongly = result.failed_nodes() - {m[:12] for m in may_fail}
    assert not wrongly, f"healthy nodes marked failed: {sorted(wrongly)}\n\n{result}"


def restore_and_compare(home, src, dest, limit=None) -> Run:
    result = run("restore", "--home", home, "--to", dest, limit=limit)
    assert not result.overran and result.returncode == 0, str(result)
    problems = compare_trees(src, os.path.join(str(dest), os.path.basename(str(src))))
    assert problems == [], problems[:20]
    return result


# ---- trees --------------------------------------------------------------------------------

def large_files_tree(root, sizes, seed):
    """One large file per directory (dir0/, dir1/, ...) and a few small files."""
    for i, size in enumerate(sizes):
        write_random(os.path.join(root, f"dir{i}", f"large-{i}.bin"), size, seed + i)
    for i in range(5):
        write_random(os.path.join(root, "notes", f"n{i}.txt"), 1000 * (i + 1), seed + 100 + i)
    return str(root)


def photo_tree(root, count, seed):
    rng = random.Random(seed)
    for i in range(count):
        size = rng.randint(2 * MIB, 8 * MIB) + rng.randint(0, 4095)
        write_random(os.path.join(root, f"IMG_{i:04d}.jpg"), size, seed + i)
    return str(root)


# ---- who holds what ------------------------------------------------------------------------

def large_records(manifest) -> list:
    """The content records of the manifest's large files."""
    contents = manifest["contents"]
    records = contents.values() if isinstance(contents, dict) else contents
    return [r for r in records if isinstance(r, dict) and r.get("t") == "L"]


def primary_holders(home) -> Counter:
    """node hex -> primary blocks (shares 0..k-1) it holds, over every large file."""
    manifest = manifest_of(home)
    k = manifest.get("k", K)
    held = Counter()
    for record in large_records(manifest):
        for extent in record["ext"]:
            for index, _, node in extent["shares"]:
                if index < k:
                    held[node] += len(extent["segs"])
    return held


def busiest_primary_holder(net, home) -> int:
    """The testnet index (never 0, the bootstrap) holding the most primaries."""
    held = primary_holders(home)
    assert held, "the manifest names no large-file holder"
    for node, _ in held.most_common():
        index = net.index_of(node)
        if index != 0:
            return index
    raise AssertionError(f"no holder but node 0: {held}")


def receiving_a_stream(net):
    """A node (never node 0) with a streamed share coming in, or None."""
    for i, node in enumerate(net.nodes):
        incoming = os.path.join(node["home"], "store", "incoming")
        try:
            names = os.listdir(incoming)
        except FileNotFoundError:
            continue
        if i and any(name.startswith("streamed.") for name in names):
            return i
    return None


def written_bytes(dest) -> int:
    """Bytes a restore has written so far under dest (its temp files and the
    files it has finished, whatever their names)."""
    total = 0
    for dirpath, _, names in os.walk(dest):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


class Stopped:
    """SIGSTOP a testnet node; leaving always sends SIGCONT (by pid)."""

    def __init__(self, net, index):
        self.node = net.nodes[index]
        self.index = index

    def __enter__(self):
        os.kill(self.node["pid"], signal.SIGSTOP)
        self.at = time.monotonic()
        return self

    def __exit__(self, *exc):
        if is_alive(self.node["pid"], self.node.get("start")):
            os.kill(self.node["pid"], signal.SIGCONT)

    @property
    def hex(self) -> str:
        return self.node["node_id"][:12]


def stop_a_node_midway(net, started, ready, victim, what, limit):
    """Once ready() says the command got far enough, SIGSTOP the node victim()
    names and let the command finish within limit: (its result, the Stopped).
    The command is killed if anything fails on the way."""
    popen = started[0]
    try:
        wait_until(lambda: ready() or popen.poll() is not None, 60, what, interval=0.002)
        node = victim()
        assert popen.poll() is None and node is not None, \
            f"the command ended before a node could be stopped (waiting for {what})"
        with Stopped(net, node) as stopped:
            result = finish(started, limit)
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.communicate(timeout=30)
    return result, stopped


def bound(all_up: float) -> float:
    return 2 * all_up + SLACK


# ---- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def net(module_testnet_factory):
    return module_testnet_factory(NODES, "faults-net")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def restorable(net, base):
    """A backup for the restore tests: a 96 MiB file and ten 3 MiB photos,
    uploaded one file at a time (these tests are about restore, not about
    uploads at once)."""
    src = str(base / "restorable" / "tree")
    write_random(os.path.join(src, "video.bin"), 96 * MIB + 777, 500)
    for i in range(10):
        write_random(os.path.join(src, "photos", f"p{i}.jpg"), 3 * MIB + i, 510 + i)
    home = str(base / "restorable" / "home")
    init_client(home, net, None, "--k", K, "--n", N)
    result = run("backup", src, "--home", home, "--parallel-files", "1", limit=300)
    assert result.returncode == 0, str(result)
    return src, home


# ---- uploads at once -----------------------------------------------------------------------

def test_large_files_uploading_at_once(net, tmp_path):
    """Two directories of a 64 MiB file and one of 40 MiB, all three
    uploading at once (--parallel-files 3, the default)."""
    src = large_files_tree(tmp_path / "tree", [64 * MIB + 1, 64 * MIB + 4099, 40 * MIB], 1000)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup = run("backup", src, "--home", home, limit=300)
    print(f"\nbackup of 3 large files at once: {backup.elapsed:.1f} s")
    assert_clean(backup)
    restore_and_compare(home, src, tmp_path / "dest", limit=300)


def test_folder_of_photos(net, tmp_path):
    """30 files of 2-8 MiB: each is a large file, three upload at once."""
    src = photo_tree(tmp_path / "photos", 30, 2000)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup = run("backup", src, "--home", home, limit=300)
    print(f"\nbackup of 30 photos: {backup.elapsed:.1f} s")
    assert_clean(backup)
    restore_and_compare(home, src, tmp_path / "dest", limit=300)


# ---- a stalled holder -------------------------------------------------------------------------

def test_restore_with_a_holder_stalled_before(net, restorable, tmp_path):
    src, home = restorable
    all_up = restore_and_compare(home, src, tmp_path / "all-up", limit=120)
    victim = busiest_primary_holder(net, home)
    limit = bound(all_up.elapsed)
    with Stopped(net, victim) as stopped:
        result = run("restore", "--home", home, "--to", tmp_path / "dest", limit=limit + OVERRUN)
    print(f"\nrestore: all up {all_up.elapsed:.1f} s; node {stopped.hex} stopped before: "
          f"{result.elapsed:.1f} s (bound {limit:.1f} s)")
    assert not result.overran and result.elapsed < limit, \
        f"restore took {result.elapsed:.1f} s with a holder stalled, all up " \
        f"{all_up.elapsed:.1f} s (bound {limit:.1f} s)\n{result}"
    assert result.returncode == 0, str(result)
    assert stopped.hex in result.text, "the restore never named the stalled node\n" + str(result)
    assert compare_trees(src, tmp_path / "dest" / os.path.basename(src)) == []


def test_restore_with_a_holder_stalled_midway(net, restorable, tmp_path):
    src, home = restorable
    all_up = restore_and_compare(home, src, tmp_path / "all-up", limit=120)
    victim = busiest_primary_holder(net, home)
    limit = bound(all_up.elapsed)
    dest = tmp_path / "dest"
    started = start("restore", "--home", home, "--to", dest)
    # stop the holder once the restore has written its first blocks
    result, stopped = stop_a_node_midway(net, started, lambda: written_bytes(dest) >= 4 * MIB,
                                         lambda: victim, "the restore to write its first blocks",
                                         limit + OVERRUN)
    print(f"\nrestore: all up {all_up.elapsed:.1f} s; node {stopped.hex} stopped "
          f"{stopped.at - started[1]:.2f} s in: {result.elapsed:.1f} s (bound {limit:.1f} s)")
    assert not result.overran and result.elapsed < limit, \
        f"restore took {result.elapsed:.1f} s with a holder stalled mid-way, all up " \
        f"{all_up.elapsed:.1f} s (bound {limit:.1f} s)\n{result}"
    assert result.returncode == 0, str(result)
    assert stopped.hex in result.text, "the restore never named the stalled node\n" + str(result)
    assert compare_trees(src, dest / os.path.basename(src)) == []


def test_backup_with_a_node_stalled_midway(net, tmp_path):
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    first = large_files_tree(tmp_path / "first" / "tree", [64 * MIB], 3000)
    all_up = run("backup", first, "--home", home, limit=300)
    assert_clean(all_up)

    src = large_files_tree(tmp_path / "second" / "tree", [64 * MIB], 3100)  # new data
    limit = bound(all_up.elapsed)
    started = start("backup", src, "--home", home)
    result, stopped = stop_a_node_midway(net, started,
                                         lambda: receiving_a_stream(net) is not None,
                                         lambda: receiving_a_stream(net),
                                         "the backup to stream a share to a node", limit + OVERRUN)
    print(f"\nbackup: all up {all_up.elapsed:.1f} s; node {stopped.hex} stopped "
          f"{stopped.at - started[1]:.2f} s in: {result.elapsed:.1f} s (bound {limit:.1f} s)")
    assert not result.overran and result.elapsed < limit, \
        f"backup took {result.elapsed:.1f} s with a node stalled mid-way, all up " \
        f"{all_up.elapsed:.1f} s (bound {limit:.1f} s)\n{result}"
    assert_clean(result, may_fail=[stopped.hex])
    assert stopped.hex in result.text, "the backup never named the stalled node\n" + str(result)
    restore_and_compare(home, src, tmp_path / "dest", limit=120)


# ---- a node gone ------------------------------------------------------------------------------

def test_node_killed_mid_store_with_uploads_at_once(net, tmp_path):
    src = large_files_tree(tmp_path / "tree", [48 * MIB, 48 * MIB + 3], 4000)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    started = start("backup", src, "--home", home)
    popen = started[0]
    victim = None
    try:
        wait_until(lambda: receiving_a_stream(net) is not None or popen.poll() is not None,
                   60, "the backup to stream a share to a node", interval=0.002)
        victim = receiving_a_stream(net)
        assert popen.poll() is None and victim is not None, \
            "the backup ended before a node could be killed"
        node = net.nodes[victim]
        net.stop(victim, signal.SIGKILL)
        result = finish(started, 300)
        assert_clean(result, may_fail=[node["node_id"]])
        manifest = manifest_of(home)
        records = large_records(manifest)
        assert records, "the manifest names no large file"
        for record in records:
            for extent in record["ext"]:
                holders = {n for _, _, n in extent["shares"]}
                assert len(holders) == N and node["node_id"] not in holders, extent["shares"]
        restore_and_compare(home, src, tmp_path / "dest", limit=120)  # the victim still down
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.communicate(timeout=30)
        if victim is not None and not net.node_alive(victim):
            net.restart(victim)


# ---- full disks -------------------------------------------------------------------------------

def _last_line(text, prefix):
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return lines[-1] if lines else ""


def add_small_nodes(net, count, capacity, base):
    """Start `count` nodes offering `capacity` each, joined to the testnet;
    the testnet's cleanup stops them (by pid)."""
    added = []
    for i in range(count):
        node = NodeProcess(os.path.join(str(base), f"small-{i}"), join=net.addr(0),
                           extra=("--capacity", capacity))
        net.started.append(node)
        node.wait_ready()
        added.append(node)
    return added


def test_a_full_node_is_skipped(testnet_factory, tmp_path):
    """9 nodes with room and one offering 12 MiB (a stream of an extent is
    8 MiB at 4-of-8): the backup fills it, goes on with the others, and every
    node stays up."""
    net = testnet_factory(NODES - 1, "full-net")
    (small,) = add_small_nodes(net, 1, "12M", tmp_path)
    src = large_files_tree(tmp_path / "tree", [40 * MIB, 40 * MIB + 5, 24 * MIB], 5000)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup = run("backup", src, "--home", home, limit=300)
    small_id = small.info.get("node_id", "")
    assert_clean(backup, may_fail=[small_id] if small_id else ())
    assert small.alive(), "the full node went down:\n" + small.log_tail()
    assert all(net.node_alive(i) for i in range(len(net.nodes))), "a node went down"
    store = tool("stats-one", small.addr, home)["store"]     # it answers, and kept its bound
    assert 0 < store["bytes_stored"] <= store["capacity"], store
    assert small_id[:12] in backup.text, "the backup never met the full node:\n" + str(backup)
    print(f"\nfull node {small_id[:12]}: {store['bytes_stored']} of {store['capacity']} bytes; "
          f"backup {backup.elapsed:.1f} s, nodes marked failed {sorted(backup.failed_nodes())}")
    restore_and_compare(home, src, tmp_path / "dest", limit=120)


def test_too_few_nodes_with_room_is_a_clear_error(testnet_factory, tmp_path):
    """7 nodes with room and 3 offering 2 MiB, at 4-of-8: the backup either
    completes (restore identical) or fails with a clear error; nodes stay up."""
    net = testnet_factory(NODES - 3, "too-full-net")
    small = add_small_nodes(net, 3, "2M", tmp_path)
    src = large_files_tree(tmp_path / "tree", [40 * MIB], 6000)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup = run("backup", src, "--home", home, limit=300)
    assert not backup.overran, str(backup)
    assert "Traceback" not in backup.stderr and "Unhandled error" not in backup.stderr, \
        str(backup)
    assert backup.mismatches() == [], str(backup)
    smalls = {n.info.get("node_id", "")[:12] for n in small}
    wrongly = backup.failed_nodes() - smalls
    assert not wrongly, f"nodes with room marked failed: {sorted(wrongly)}\n{backup}"
    print(f"\n3 of 10 nodes full: backup exit {backup.returncode} in {backup.elapsed:.1f} s, "
          f"nodes marked failed {sorted(backup.failed_nodes())}; "
          + (_last_line(backup.stderr, "error:") or "no error"))
    if backup.returncode == 0:
        restore_and_compare(home, src, tmp_path / "dest", limit=120)
    else:
        assert backup.returncode == 2, str(backup)
        error = [line for line in backup.stderr.splitlines() if line.startswith("error:")]
        assert error, str(backup)
        assert re.search(r"space|full|nodes? (are|is)", error[0], re.I), error[0]
    assert all(n.alive() for n in small), "a full node went down"
    for node in small:
        store = tool("stats-one", node.addr, home)["store"]
        assert store["bytes_stored"] <= store["capacity"], store
    assert all(net.node_alive(i) for i in range(len(net.nodes))), "a node went down"
