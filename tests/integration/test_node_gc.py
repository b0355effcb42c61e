"""What a real node process reclaims on its own (issue 19, the node side).

- Compaction of an archive whose members were deleted (once the owner's
  DELETEs stop): the other members answer RETRIEVE and VERIFY during it,
  after a SIGKILL in the middle of it and a restart (which compacts again),
  and after it; the space it frees shows in STATS and `flud testnet status`.
- Wrong and hostile DELETEs (another owner's share or archive member, a key
  nobody stored) answer NOT_FOUND and change no byte.
- Leases: owner A stops, owner B keeps coming; once the node's lease clock
  (FLUD_NODE_CLOCK_FILE) passes the lease, A's data is in the trash and B's
  untouched; A coming back gets everything again, or, once the trash time
  has passed too, A's data is gone and its space free.
- A client job renews its leases on every node before it runs, so one that
  fails at once still renewed, and says until when the nodes keep the data
  (the shortest lease the nodes reported).

Owners are client identities (a home directory each) acting through
tests/integration/peer_tool.py; a third identity only asks for STATS.
"""
import hashlib
import json
import os
import signal
import time

import pytest

from tests.integration.helpers import (NodeProcess, flud, init_client, output, tool, tool_popen,
                                       wait_until)

pytestmark = pytest.mark.integration

DAY = 86400
MEMBER = 64 * 1024
MEMBERS = 40
SPAN = MEMBER + 512  # a member's tar header and data (MEMBER is a multiple of 512)
RATIO = 0.2  # storage.limits.COMPACT_GARBAGE_RATIO
TOOL_TIMEOUT = 60.0


def keyfile(tmp_path, name, keys) -> str:
    path = tmp_path / f"{name}.keys"
    path.write_text("\n".join(keys) + "\n")
    return str(path)


def store_stats(node, observer) -> dict:
    return tool("stats-one", node.addr, observer)["store"]


def all_ok(results: dict) -> bool:
    return bool(results) and set(results.values()) == {"ok"}


def store_files(node) -> dict:
    """Digest of every share and archive file of a node's store."""
    files = {}
    root = os.path.join(node.home, "store")
    for sub in ("shares", "archives"):
        for parent, _, names in os.walk(os.path.join(root, sub)):
            for name in names:
                with open(os.path.join(parent, name), "rb") as f:
                    files[os.path.relpath(os.path.join(parent, name), root)] = \
                        hashlib.sha256(f.read()).hexdigest()
    return files


def compacting(node) -> bool:
    archives = os.path.join(node.home, "store", "archives")
    return any(name.endswith(".compact") for name in os.listdir(archives))


# ---- compaction -----------------------------------------------------------------

def test_members_are_served_during_and_after_a_compaction_killed_half_way(tmp_path, monkeypatch):
    alice, bob, observer = (str(tmp_path / n) for n in ("alice", "bob", "observer"))
    monkeypatch.setenv("FLUD_COMPACTION_PAUSE", "60")
    node = NodeProcess(tmp_path / "node")
    try:
        node.wait_ready()
        members = tool("put-archive", node.addr, alice, 1, MEMBERS, MEMBER)["members"]
        bobs = tool("put-archive", node.addr, bob, 2, 4, MEMBER)["members"]
        bob_share = tool("store", node.addr, bob, 300_000, 3)["key"]
        before = store_stats(node, observer)
        # Every other member from the first: the 9th passes 20% of the archive.
        crossing = int(RATIO * MEMBERS) + 1
        dead = members[0:2 * crossing:2]
        live = [k for k in members if k not in dead]
        deleting = tool_popen("delete", node.addr, alice, keyfile(tmp_path, "dead", dead))
        try:
            wait_until(lambda: compacting(node), 60, "the compaction to start")
            # During it (the worker sleeps after its first run): the others are served.
            assert all_ok(tool("check", node.addr, alice, keyfile(tmp_path, "live", live)))
            assert all_ok(tool("check", node.addr, bob, keyfile(tmp_path, "bob", bobs + [bob_share])))
            assert compacting(node)
            node.stop(signal.SIGKILL)
        finally:
            deleting.kill()
            deleting.communicate(timeout=10)
        monkeypatch.delenv("FLUD_COMPACTION_PAUSE")
        node = NodeProcess(node.home, port=node.port)
        node.wait_ready()
        # The unfinished compaction was discarded at open, and the node compacts
        # again at start, the archive being past the threshold still.
        assert "discarding an unfinished compaction" in node.log_tail("node.log", 200)
        assert all_ok(tool("check", node.addr, alice, keyfile(tmp_path, "live", live)))
        gone = tool("check", node.addr, alice, keyfile(tmp_path, "dead", dead))
        assert set(gone.values()) == {"NOT_FOUND"}, gone  # every delete had committed
        reclaimed = crossing * SPAN
        stats = wait_until(lambda: (s := store_stats(node, observer))["garbage_bytes"] == 0 and s,
                           30, "the compaction after the restart", interval=0.3)
        assert stats["bytes_stored"] == before["bytes_stored"] - reclaimed
        assert stats["free"] == before["free"] + reclaimed
        assert not compacting(node)
        assert all_ok(tool("check", node.addr, alice, keyfile(tmp_path, "live", live)))
        assert all_ok(tool("check", node.addr, bob, keyfile(tmp_path, "bob", bobs + [bob_share])))
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)


# ---- wrong and hostile DELETEs ---------------------------------------------------

def test_wrong_deletes_change_nothing_on_a_real_node(node_factory, tmp_path):
    node = node_factory("node")
    alice, mallory, observer = (str(tmp_path / n) for n in ("alice", "mallory", "observer"))
    share = tool("store", node.addr, alice, 200_000, 7)["key"]
    members = tool("put-archive", node.addr, alice, 8, 5, 4096)["members"]
    own = tool("store", node.addr, mallory, 1000, 9)["key"]
    files, stats = store_files(node), store_stats(node, observer)
    unknown = hashlib.sha256(b"nobody stored this").hexdigest()
    targets = [share, *members, unknown]
    answers = tool("delete", node.addr, mallory, keyfile(tmp_path, "targets", targets))
    assert answers == {key: "NOT_FOUND" for key in targets}
    answers = tool("delete", node.addr, alice, keyfile(tmp_path, "others", [own, unknown]))
    assert answers == {own: "NOT_FOUND", unknown: "NOT_FOUND"}
    assert store_files(node) == files
    after = store_stats(node, observer)
    for field in ("shares", "members", "bytes_stored", "garbage_bytes", "free"):
        assert after[field] == stats[field], field
    assert all_ok(tool("check", node.addr, alice, keyfile(tmp_path, "alice", [share, *members])))
    assert all_ok(tool("check", node.addr, mallory, keyfile(tmp_path, "own", [own])))


# ---- leases ----------------------------------------------------------------------

class Owners:
    """Owners A and B with data on the same nodes, and a node clock to move."""

    def __init__(self, tmp_path, nodes, clock_file):
        self.tmp_path = tmp_path
        self.nodes = nodes
        self.clock_file = clock_file
        self.offset = 0
        self.a, self.b, self.observer = (str(tmp_path / n) for n in ("a", "b", "observer"))
        self.keys = {self.a: {}, self.b: {}}
        for i, node in enumerate(nodes):
            shared = tool("store", node.addr, self.a, 150_000, 100 + i)["key"]
            assert tool("store", node.addr, self.b, 150_000, 100 + i)["key"] == shared
            for owner, seed in ((self.a, 200), (self.b, 300)):
                own = tool("store", node.addr, owner, 120_000 + 1000 * i, seed + i)["key"]
                members = tool("put-archive", node.addr, owner, seed + 50 + i, 6, 8192)["members"]
                self.keys[owner][node.addr] = [shared, own, *members]

    def check(self, owner, node) -> dict:
        keys = self.keys[owner][node.addr]
        name = f"{os.path.basename(owner)}-{node.port}"
        return tool("check", node.addr, owner, keyfile(self.tmp_path, name, keys))

    def stats(self, node) -> dict:
        return tool("stats-one", node.addr, self.observer)

    def advance_to(self, days) -> None:
        """Move every node's lease clock and wait until each has read it."""
        self.offset = days * DAY
        self.clock_file.write_text(str(self.offset))
        for node in self.nodes:
            wait_until(lambda: self.stats(node)["leases"]["clock"] - time.time() > self.offset - 600,
                       30, f"node {node.port} to read the clock offset", interval=0.3)

    def b_comes(self) -> None:
        for node in self.nodes:
            assert all_ok(self.check(self.b, node))


@pytest.fixture
def owners(tmp_path, monkeypatch):
    clock_file = tmp_path / "clock"
    clock_file.write_text("0")
    monkeypatch.setenv("FLUD_NODE_CLOCK_FILE", str(clock_file))
    nodes = []
    try:
        for name in ("n0", "n1"):
            node = NodeProcess(tmp_path / name, extra=("--lease", "90d", "--trash-time", "14d",
                                                       "--lease-sweep-interval", "0.2"))
            nodes.append(node)
            node.wait_ready()
        yield Owners(tmp_path, nodes, clock_file)
    finally:
        for node in nodes:
            if node.alive():
                node.stop(signal.SIGKILL)


def wait_trash(owners, node, count) -> dict:
    return wait_until(lambda: (s := owners.stats(node))["store"]["trashed_owners"] == count and s,
                      30, f"{count} owner(s) in the trash of node {node.port}", interval=0.3)


@pytest.mark.parametrize("a_returns", [True, False], ids=["a-returns", "a-gone"])
def test_an_owner_that_stops_is_trashed_then_restored_or_deleted(owners, a_returns):
    before = {node.port: owners.stats(node)["store"] for node in owners.nodes}
    for day in (30, 60, 85):  # B makes requests all along; A none
        owners.advance_to(day)
        owners.b_comes()
    for node in owners.nodes:
        assert owners.stats(node)["store"]["trashed_owners"] == 0
    owners.advance_to(91)
    owners.b_comes()
    for node in owners.nodes:
        store = wait_trash(owners, node, 1)["store"]
        assert store["bytes_stored"] == before[node.port]["bytes_stored"]  # still on disk
        assert store["trashed_bytes"] == 150_000 + 120_000 + 1000 * owners.nodes.index(node) + 6 * 8192
        assert all_ok(owners.check(owners.b, node))
    if a_returns:
        owners.advance_to(95)
        for node in owners.nodes:
            assert all_ok(owners.check(owners.a, node))  # its request brings it back
            assert owners.stats(node)["store"]["trashed_owners"] == 0
        owners.advance_to(120)  # A came at day 95: not trashed again
        owners.b_comes()
        for node in owners.nodes:
            assert owners.stats(node)["store"]["trashed_owners"] == 0
            assert all_ok(owners.check(owners.a, node))
        return
    owners.advance_to(106)  # past 91 + 14 days in the trash
    owners.b_comes()
    for i, node in enumerate(owners.nodes):
        stats = wait_until(lambda: (s := owners.stats(node))["leases"]["purged"] >= 1 and s,
                           30, f"node {node.port} to purge A", interval=0.3)
        store = stats["store"]
        assert store["trashed_owners"] == 0
        # A's own share and its archive are freed; the share B holds too stays.
        freed = 120_000 + 1000 * i + 6 * (8192 + 512)
        assert store["bytes_stored"] == before[node.port]["bytes_stored"] - freed
        assert store["free"] == before[node.port]["free"] + freed
        assert all_ok(owners.check(owners.b, node))
        answers = owners.check(owners.a, node)
        assert set(answers.values()) == {"NOT_FOUND"}, answers


# ---- flud testnet status ------------------------------------------------------------

def status_space(net) -> dict:
    """node 0's stored, free, garbage and trash columns (MB) of `flud testnet status`."""
    proc = flud("testnet", "status", "--dir", net.dir, timeout=60)
    assert proc.returncode == 0, output(proc)
    header = next(line for line in proc.stdout.splitlines() if "stored" in line)
    assert header.split()[8:12] == ["stored", "free", "garbage", "trash"], header
    row = next(line for line in proc.stdout.splitlines() if line.split()[:1] == ["0"])
    values = row.split()[8:16:2]  # numbers; every other token is "MB"
    return dict(zip(("stored", "free", "garbage", "trash"), map(float, values)))


def test_testnet_status_shows_the_space_a_compaction_frees(testnet_factory, tmp_path):
    net = testnet_factory(1)
    alice = str(tmp_path / "alice")
    members = tool("put-archive", net.addr(0), alice, 4, MEMBERS, MEMBER)["members"]
    before = status_space(net)
    assert before["stored"] == pytest.approx(MEMBERS * SPAN / 1e6, abs=0.1)
    dead = members[:int(RATIO * MEMBERS)]  # up to the threshold: garbage, not compacted
    assert all_ok(tool("delete", net.addr(0), alice, keyfile(tmp_path, "dead", dead)))
    middle = status_space(net)
    assert middle["stored"] == before["stored"]
    assert middle["garbage"] == pytest.approx(len(dead) * SPAN / 1e6, abs=0.1)
    more = members[len(dead)]
    assert all_ok(tool("delete", net.addr(0), alice, keyfile(tmp_path, "more", [more])))
    # Compacted once the node has seen no DELETE from alice for a moment.
    after = wait_until(lambda: (s := status_space(net))["garbage"] == 0 and s, 30,
                       "the compaction", interval=0.3)
    freed = (len(dead) + 1) * SPAN / 1e6
    assert after["stored"] == pytest.approx(before["stored"] - freed, abs=0.1)
    assert after["free"] == pytest.approx(before["free"] + freed, abs=0.1)


def test_a_job_that_fails_still_renews_and_says_until_when(tmp_path):
    first = NodeProcess(tmp_path / "r0", extra=("--lease", "200d"))
    nodes = [first]
    try:
        first.wait_ready()
        nodes += [NodeProcess(tmp_path / f"r{i}", join=first.addr, extra=("--lease", "300d"))
                  for i in (1, 2)]
        for node in nodes[1:]:
            node.wait_ready()
        observer = str(tmp_path / "observer")
        wait_until(lambda: tool("stats-one", first.addr, observer)["peers_alive"] >= 2, 30,
                   "the nodes to know each other", interval=0.3)
        home = tmp_path / "home"
        init_client(home, join=first.addr)
        src = tmp_path / "src"
        src.mkdir()
        (src / "a.txt").write_bytes(b"alpha")
        renewals = {node.addr: tool("stats-one", node.addr, observer)["leases"]["renewals"]
                    for node in nodes}  # the observer's own renewal counted: once an hour
        before = time.time()
        proc = flud("backup", src, "--home", home, "--json")  # 3 nodes, n=8: refused
        assert proc.returncode == 2 and "only 3 nodes are known" in proc.stderr, output(proc)
        leases = json.loads(proc.stdout.splitlines()[-1])["leases"]
        assert leases["lease_seconds"] == 200 * DAY  # the shortest the nodes reported
        assert before <= leases["renewed"] <= time.time()
        assert leases["kept_until"] == leases["renewed"] + 200 * DAY
        for node in nodes[1:]:  # the refused job reached these two: their leases renewed
            # (any authenticated request renews: the job's STATS, and its root reads)
            assert tool("stats-one", node.addr, observer)["leases"]["renewals"] > \
                renewals[node.addr]
        listing = flud("ls", "--home", home)
        until = time.strftime("%Y-%m-%d", time.localtime(leases["kept_until"]))
        assert f"until at least {until}" in listing.stdout, output(listing)
    finally:
        for node in nodes:
            if node.alive():
                node.stop(signal.SIGKILL)
