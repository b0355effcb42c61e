"""Backup and restore durability with real node processes (issue 3).

One 12-node testnet and one backup of a tree with a 64 MiB file are shared by
the module. Tests that stop nodes bring them back (same home, same port) before
they end, so the order of the tests does not matter.
"""
import os
import re
import signal
import socket
import stat
import time

import pytest

from flud.client.repository import extents
from flud.client.home import DEFAULTS
from tests.integration.helpers import (Testnet, compare_trees, flud, flud_popen, init_client,
                                       manifest_of, output, wait_gone, wait_until,
                                       write_random)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
NODES = 12
K, N = 4, 8
BIG_SIZE = 64 * MIB + 12345          # not a whole number of segments
SEGMENT_SIZE = DEFAULTS["segment_size"]
EXTENT_BYTES = extents.EXTENT_BYTES
PASSPHRASE = "correct horse battery staple"


# ---- the shared testnet and backup ----------------------------------------------

@pytest.fixture(scope="module")
def net(module_testnet_factory) -> Testnet:
    return module_testnet_factory(NODES, "backup-net")


def make_tree(root):
    """Small files, nested dirs, a symlink, an empty dir, a 0600 file, an
    empty file, and one file of 64 MiB and a bit."""
    os.makedirs(root)
    for i, size in enumerate([1, 17, 300, 999, 4096, 20000, 77777, 300000, 900000]):
        write_random(os.path.join(root, "docs" if i % 2 else "src/deep/er", f"f{i}.bin"), size, i)
    write_random(os.path.join(root, "private.key"), 333, 99, mode=0o600)
    open(os.path.join(root, "empty.txt"), "wb").close()
    os.makedirs(os.path.join(root, "empty-dir"))
    os.symlink("docs/f1.bin", os.path.join(root, "link-to-f1"))
    os.symlink("../nowhere", os.path.join(root, "dangling"))
    write_random(os.path.join(root, "media", "big.bin"), BIG_SIZE, 64)
    os.chmod(os.path.join(root, "docs"), 0o750)


class Backed:
    """A client home with one backup of a tree."""

    def __init__(self, src, home, proc):
        self.src = str(src)
        self.home = str(home)
        self.proc = proc
        self.manifest = manifest_of(home)

    @property
    def name(self) -> str:
        return os.path.basename(self.src)

    def big_extents(self) -> list:
        """[{"shares": [[share index, stream key hex, node hex]], "segs": [...]}] of big.bin."""
        rel = os.path.join(self.name, "media", "big.bin")
        entry = next(e for e in self.manifest["entries"] if e[0] == rel)
        record = self.manifest["contents"][entry[5]]
        assert record["t"] == "L", record
        return record["ext"]


@pytest.fixture(scope="module")
def backed(net, tmp_path_factory) -> Backed:
    base = tmp_path_factory.mktemp("backed")
    src, home = base / "tree", base / "home"
    make_tree(str(src))
    init_client(home, net, None, "--k", K, "--n", N)
    proc = flud("backup", src, "--home", home)
    assert proc.returncode == 0, output(proc)
    return Backed(src, home, proc)


def restore(backed_or_home, dest, *paths, expect=0):
    home = backed_or_home.home if isinstance(backed_or_home, Backed) else backed_or_home
    proc = flud("restore", "--home", home, "--to", dest, *paths)
    assert proc.returncode == expect, output(proc)
    return proc


def assert_identical(backed: Backed, dest):
    problems = compare_trees(backed.src, os.path.join(str(dest), backed.name))
    assert problems == [], problems


def retrieves(proc) -> int:
    """The RETRIEVEs of the files' bytes (not of the snapshot's records)."""
    m = re.search(r"(\d+) RETRIEVEs \((\d+) of them for the snapshot's records\)", proc.stdout)
    assert m, output(proc)
    return int(m.group(1)) - int(m.group(2))


# ---- tests ------------------------------------------------------------------------

def test_backup_summary_and_restore_identical(backed, tmp_path):
    out = backed.proc.stdout
    files = sum(1 for e in backed.manifest["entries"] if e[1] == "file")
    assert re.search(rf"\b{files} files \({files} new, 0 changed, 0 unchanged, 0 skipped", out), out
    extents = backed.big_extents()
    assert sum(len(e["segs"]) for e in extents) == -(-BIG_SIZE // SEGMENT_SIZE)
    for extent in extents:  # n share streams on n distinct nodes
        holders = {node for _, _, node in extent["shares"]}
        assert len(extent["shares"]) == N and len(holders) == N, extent["shares"]

    proc = restore(backed, tmp_path / "dest")
    assert_identical(backed, tmp_path / "dest")
    assert "already existed" not in proc.stdout
    dest = tmp_path / "dest" / backed.name
    assert os.stat(dest / "private.key").st_mode & 0o777 == 0o600
    assert os.path.islink(dest / "link-to-f1") and os.readlink(dest / "dangling") == "../nowhere"
    assert os.listdir(dest / "empty-dir") == []


def test_second_backup_of_unchanged_tree_sends_no_file_data(backed):
    proc = flud("backup", backed.src, "--home", backed.home)
    assert proc.returncode == 0, output(proc)
    files = sum(1 for e in backed.manifest["entries"] if e[1] == "file")
    assert f"(0 new, 0 changed, {files} unchanged, 0 skipped" in proc.stdout, output(proc)
    assert "read 0 B," in proc.stdout, output(proc)
    m = re.search(r"sent (\S+) (\S+) in (\d+) STOREs \((\d+) tars\)", proc.stdout)
    assert m, output(proc)
    # no file data and no directory record: only the snapshot's map page and
    # its head (snapshot record and map index), a tar per node each, all of it
    # within the 64 KiB a no-change snapshot may cost
    assert int(m.group(3)) == int(m.group(4)) <= 2 * (N + 2), output(proc)
    assert float(m.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6}[m.group(2)] <= 64 * 1024


def test_corrupt_share_is_detected_named_and_skipped(net, backed, tmp_path):
    extent = backed.big_extents()[0]
    index, key_hex, node_hex = min(extent["shares"])  # a primary: restore asks for it first
    assert index < K
    holder = net.index_of(node_hex)
    path = net.share_path(holder, key_hex)
    with open(path, "rb") as f:
        original = f.read()
    damaged = bytearray(original)
    for i in range(0, len(damaged), 1024):          # every 1 KiB: any challenged span sees it
        damaged[i] ^= 0xFF
    with open(path, "wb") as f:
        f.write(damaged)
    try:
        proc = restore(backed, tmp_path / "dest")
        assert_identical(backed, tmp_path / "dest")
        text = proc.stdout + proc.stderr
        assert re.search(rf"bad share {key_hex[:16]} on node {node_hex[:12]}: .*corrupt", text), \
            output(proc)

        check = flud("verify", "--home", backed.home)
        assert check.returncode == 1, output(check)
        assert f"corrupt: share {key_hex[:16]} on node {node_hex[:12]}" in check.stdout, output(check)
        rows = {line.split()[0]: line.split()[1:] for line in check.stdout.splitlines()
                if re.match(r"^[0-9a-f]{12} ", line) or line.startswith("total ")}
        assert rows[node_hex[:12]][2] == "1", output(check)    # corrupt column
        assert rows["total"][1:3] == ["0", "1"], output(check)  # 0 missing, 1 corrupt
    finally:
        with open(path, "wb") as f:
            f.write(original)


def test_total_loss_restore_from_exported_key(net, backed, tmp_path):
    keyfile = tmp_path / "flud.key"
    env = {"FLUD_PASSPHRASE": PASSPHRASE}
    proc = flud("key", "export", "--home", backed.home, keyfile, env=env)
    assert proc.returncode == 0, output(proc)
    assert os.stat(keyfile).st_mode & 0o777 == 0o600

    new_home = tmp_path / "new-home"                # the old home is "lost": not used below
    proc = flud("init", "--home", new_home, "--import-key", keyfile, "--join", net.addr(5), env=env)
    assert proc.returncode == 0, output(proc)
    proc = restore(new_home, tmp_path / "dest")
    assert_identical(backed, tmp_path / "dest")

    # verify works from what the network's manifest records, too
    check = flud("verify", "--home", new_home)
    assert check.returncode == 0, output(check)
    total = next(line for line in check.stdout.splitlines() if line.startswith("total "))
    confirmed, missing, corrupt, unreachable, unchallenged = map(int, total.split()[1:])
    big_streams = -(-BIG_SIZE // EXTENT_BYTES) * N  # one share stream per node per extent
    # unchallenged 0: the map's own bundles, whose challenges only the lost
    # home had, were fetched and checked against their keys
    assert confirmed > big_streams and missing == corrupt == unreachable == unchallenged == 0, \
        check.stdout


def test_wrong_passphrase_is_a_clear_error(net, backed, tmp_path):
    keyfile = tmp_path / "flud.key"
    proc = flud("key", "export", "--home", backed.home, keyfile, env={"FLUD_PASSPHRASE": PASSPHRASE})
    assert proc.returncode == 0, output(proc)
    new_home = tmp_path / "new-home"
    proc = flud("init", "--home", new_home, "--import-key", keyfile, "--join", net.addr(1),
                env={"FLUD_PASSPHRASE": "not the passphrase"})
    assert proc.returncode == 2, output(proc)
    assert "passphrase" in proc.stderr.lower() and "Traceback" not in proc.stderr, output(proc)
    assert not os.path.exists(new_home / "config.json")


def test_restore_never_overwrites_an_existing_file(backed, tmp_path):
    rel = os.path.join(backed.name, "docs", "f3.bin")
    dest = tmp_path / "dest"
    os.makedirs(dest / backed.name / "docs")
    with open(dest / rel, "wb") as f:
        f.write(b"mine, not the backup's")
    proc = restore(backed, dest, rel)
    with open(dest / rel, "rb") as f:
        assert f.read() == b"mine, not the backup's"
    with open(str(dest / rel) + ".flud-restored", "rb") as f, open(os.path.join(backed.src, "docs", "f3.bin"), "rb") as g:
        assert f.read() == g.read()
    assert "flud-restored" in proc.stdout and "already existed" in proc.stdout, output(proc)
    # only what was asked for, at the cost of a few RETRIEVEs
    assert sorted(os.listdir(dest / backed.name / "docs")) == ["f3.bin", "f3.bin.flud-restored"]
    assert retrieves(proc) <= 4, output(proc)


def test_a_socket_is_skipped_with_a_warning_and_counted_and_a_fifo_kept(net, tmp_path):
    src = tmp_path / "tree"
    write_random(src / "a.txt", 1000, 1)
    os.mkfifo(src / "pipe")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
    home = tmp_path / "home"
    init_client(home, net)
    proc = flud("backup", src, "--home", home, timeout=60)   # a fifo must not block the read
    assert proc.returncode == 1, output(proc)
    assert "1 skipped" in proc.stdout, output(proc)
    assert re.search(r"warning: skipped .*sock: a socket", proc.stderr), output(proc)
    restore(str(home), tmp_path / "dest")
    assert sorted(os.listdir(tmp_path / "dest" / "tree")) == ["a.txt", "pipe"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "dest" / "tree" / "pipe").st_mode)


def test_a_budget_of_one_segment_still_backs_up_a_large_file(net, tmp_path):
    """The connections' share of the budget never takes the room one large
    file's segment needs (it used to, and such a backup waited forever)."""
    src = tmp_path / "tree"
    write_random(src / "big.bin", 3 * SEGMENT_SIZE + 1, 7)
    home = tmp_path / "home"
    init_client(home, net)
    footprint = 2 * SEGMENT_SIZE  # k primaries and n-k parity blocks of one segment, at 4-of-8
    proc = flud("backup", src, "--home", home, "--memory-budget", str(footprint // MIB),
                timeout=60)
    assert proc.returncode == 0, output(proc)
    restore(str(home), tmp_path / "dest")
    assert compare_trees(src, tmp_path / "dest" / "tree") == []


def test_restore_with_n_minus_k_holders_stopped(net, backed, tmp_path):
    extent = backed.big_extents()[0]
    # the holders of the primaries first (so restore must decode), never node 0
    holders = [net.index_of(node) for _, _, node in sorted(extent["shares"])]
    victims = [i for i in holders if i != 0][:N - K]
    assert len(victims) == N - K
    try:
        for i in victims:
            net.stop(i, signal.SIGTERM, wait=False)
        left = wait_gone([(net.nodes[i]["pid"], net.nodes[i]["start"]) for i in victims])
        assert not left, f"nodes did not stop: {left}"
        proc = restore(backed, tmp_path / "dest")
        assert_identical(backed, tmp_path / "dest")
        print(proc.stdout)
    finally:
        for i in victims:
            if not net.node_alive(i):
                net.restart(i)


def _receiving_a_stream(net):
    """A node (never node 0) with a streamed share coming in, or None."""
    for i, node in enumerate(net.nodes):
        incoming = os.path.join(node["home"], "store", "incoming")
        if i and os.path.isdir(incoming) and any(
                name.startswith("streamed.") for name in os.listdir(incoming)):
            return i
    return None


def test_node_killed_in_the_middle_of_a_backup(net, tmp_path):
    src = tmp_path / "tree"
    write_random(src / "big.bin", 40 * MIB, 40)
    write_random(src / "small.txt", 5000, 41)
    home = tmp_path / "home"
    init_client(home, net)
    backup = flud_popen("backup", src, "--home", home)
    victim = None
    try:
        # kill a node while an extent's stream is coming in to it: mid-run
        wait_until(lambda: _receiving_a_stream(net) is not None or backup.poll() is not None,
                   60, "the backup to stream a share to a node", interval=0.005)
        victim = _receiving_a_stream(net)
        assert backup.poll() is None and victim is not None, \
            "the backup finished before a node could be killed"
        node = net.nodes[victim]
        net.stop(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        stdout, stderr = backup.communicate(timeout=120)
    finally:
        if backup.poll() is None:
            backup.kill()
            backup.communicate(timeout=10)
    try:
        assert backup.returncode == 0, f"exit {backup.returncode}\n{stdout}\n{stderr}"
        assert node["node_id"][:12] in stderr, "the backup never noticed the killed node:\n" + stderr
        print(f"backup went on {time.monotonic() - killed_at:.1f} s after the kill")
        manifest = manifest_of(home)
        entry = next(e for e in manifest["entries"] if e[0].endswith("big.bin"))
        for extent in manifest["contents"][entry[5]]["ext"]:
            holders = {n for _, _, n in extent["shares"]}
            assert len(holders) == N and node["node_id"] not in holders, extent["shares"]
        restore(str(home), tmp_path / "dest")   # with the victim still down
        problems = compare_trees(src, tmp_path / "dest" / "tree")
        assert problems == [], problems
    finally:
        if victim is not None:
            net.restart(victim)


# ---- too few nodes: a testnet of its own ----------------------------------------------

@pytest.fixture(scope="module")
def too_few(tmp_path_factory):
    """Init against 9 nodes (n=8), stop 3, back up: the outcome, net already gone."""
    base = tmp_path_factory.mktemp("too-few")
    net = Testnet(base / "net")
    try:
        proc = net.up(9)
        assert proc.returncode == 0, output(proc)
        init_client(base / "home", net)
        write_random(base / "tree" / "big.bin", 3 * MIB, 3)
        write_random(base / "tree" / "small.txt", 100, 4)
        for i in (6, 7, 8):
            net.stop(i, signal.SIGTERM)
        return flud("backup", base / "tree", "--home", base / "home", timeout=120)
    finally:
        net.cleanup()


def test_too_few_reachable_nodes_is_a_clear_error(too_few):
    assert too_few.returncode == 2, output(too_few)
    error = [line for line in too_few.stderr.splitlines() if line.startswith("error:")]
    assert error, output(too_few)
    assert re.search(r"nodes? (are|is) (reachable|known)", error[0]), error[0]
    assert "start more nodes" in error[0].lower(), error[0]


def test_too_few_reachable_nodes_fails_without_a_traceback(too_few):
    assert "Traceback" not in too_few.stderr and "Unhandled error" not in too_few.stderr, \
        output(too_few)


def test_a_compressible_large_file_is_stored_compressed_and_restores(net, tmp_path):
    """A 40 MiB log is compressed segment by segment before encryption; an
    8 MiB clip of media beside it is stored as it is. Both restore
    identical, and the backup holds one segment's footprint per file."""
    from tools.bench.tree_content import content, pools_for

    src = tmp_path / "tree"
    os.makedirs(src / "logs")
    with open(src / "logs" / "app.log", "wb") as f:
        for part in range(5):
            f.write(content(pools_for(1), "log", ".log", 8 * MIB + part, 10 + part))
    write_random(src / "media" / "clip.mp4", 8 * MIB + 3, 8)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    proc = flud("backup", src, "--home", home, timeout=120)
    assert proc.returncode == 0, output(proc)
    peak = re.search(r"peak per transfer ([\d.]+) MB", proc.stdout)
    assert peak and float(peak.group(1)) * 1e6 <= 2 * SEGMENT_SIZE + 0.1e6, output(proc)
    manifest = manifest_of(home)
    records = {e[0]: manifest["contents"][e[5]] for e in manifest["entries"] if e[1] == "file"}
    log_segs = [s for e in records["tree/logs/app.log"]["ext"] for s in e["segs"]]
    clip_segs = [s for e in records["tree/media/clip.mp4"]["ext"] for s in e["segs"]]
    # (its last segment, 10 bytes, would save too little)
    assert all(len(s) == 6 and s[4] == "zstd" for s in log_segs[:-1]), log_segs[0]
    assert all(len(s) == 4 for s in clip_segs)
    stored = sum(s[5] for s in log_segs[:-1])
    assert stored < sum(s[1] for s in log_segs[:-1]) // 2
    restore(str(home), tmp_path / "dest")
    assert compare_trees(src, tmp_path / "dest" / "tree") == []
