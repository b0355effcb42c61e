"""Small-file aggregation with real node processes (issue 4): few STOREs for
the 51-file home mix, a small file restored with a few RETRIEVEs of its own
bytes, and per-sender archives that survive a SIGKILL in the middle of appends.
"""
import glob
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import threading

import pytest

from tests.integration.helpers import (NodeProcess, PYTHON, compare_trees, flud, init_client,
                                       manifest_of, output, shared_file, tool, tool_popen,
                                       wait_until)

pytestmark = pytest.mark.integration

NODES = 12
K, N = 4, 8
MIX_FILES = 51
MIX_BYTES = 3_200_000


@pytest.fixture(scope="module")
def net(module_testnet_factory):
    return module_testnet_factory(NODES, "aggregation-net")


@pytest.fixture(scope="module")
def gen_mix():
    return shared_file("tools/gen_mix.py", "the generator of the seed's 51-file home mix")


@pytest.fixture(scope="module")
def mix(gen_mix, net, tmp_path_factory):
    base = tmp_path_factory.mktemp("mix")
    src = base / "mix"
    gen = subprocess.run([PYTHON, gen_mix, str(src)], capture_output=True, text=True, timeout=60)
    assert gen.returncode == 0, gen.stderr
    home = base / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    before = net.stats()
    proc = flud("backup", src, "--home", home)
    assert proc.returncode == 0, output(proc)
    after = net.stats()
    return {"src": str(src), "home": str(home), "proc": proc, "before": before, "after": after,
            "net": net}


def _total(rows, *path) -> int:
    total = 0
    for row in rows:
        value = row["stats"]
        for name in path:
            value = value[name]
        total += value
    return total


def test_mix_backup_sends_few_stores(mix):
    proc = mix["proc"]
    files = sum(1 for e in manifest_of(mix["home"])["entries"] if e[1] == "file")
    assert files == MIX_FILES
    m = re.search(r"in (\d+) STOREs \((\d+) tars\)", proc.stdout)
    assert m, output(proc)
    stores, tars = int(m.group(1)), int(m.group(2))

    manifest = manifest_of(mix["home"])
    large_extents = sum(len(r.get("ext", ())) for r in manifest["contents"].values())
    # at most one tar per destination node for the files, and one per node
    # for each of the snapshot's three rounds of records (its tree, its map
    # page, its head: n nodes and the aggregator's 2 spares each); every
    # other STORE is a share stream of a large file's extent (n, plus one
    # long-tail spare)
    assert 0 < tars <= NODES + 3 * (N + 2), output(proc)
    assert stores - tars <= large_extents * (N + 1), output(proc)
    assert stores < MIX_FILES * N // 4, output(proc)
    # the nodes saw those STOREs, plus the spares the long-tail cut started and
    # cancelled (a hedge per slow share at most): still far fewer than one per file
    seen = _total(mix["after"], "server", "stores") - _total(mix["before"], "server", "stores")
    assert stores <= seen < MIX_FILES * N // 4, (stores, seen)
    # stored bytes, tar headers and padding (and the manifest) included: <= 1.25 n/k
    stored = (_total(mix["after"], "store", "bytes_stored")
              - _total(mix["before"], "store", "bytes_stored"))
    print(f"mix: {stores} STOREs ({tars} tars), stored {stored} B = "
          f"{stored / MIX_BYTES:.2f} x plaintext")
    assert stored <= 1.25 * N / K * MIX_BYTES


def test_mix_restores_identical(mix, tmp_path):
    proc = flud("restore", "--home", mix["home"], "--to", tmp_path / "dest")
    assert proc.returncode == 0, output(proc)
    assert compare_trees(mix["src"], tmp_path / "dest" / "mix") == []


def test_one_small_file_costs_a_few_retrieves_of_its_own_bytes(mix, tmp_path):
    net = mix["net"]
    entries = manifest_of(mix["home"])["entries"]
    small = sorted((e for e in entries if e[1] == "file" and 1000 <= e[4] < 10000),
                   key=lambda e: e[0])
    rel, size = small[len(small) // 2][0], small[len(small) // 2][4]
    before = net.stats()
    proc = flud("restore", "--home", mix["home"], "--to", tmp_path / "dest", rel)
    after = net.stats()
    assert proc.returncode == 0, output(proc)
    m = re.search(r"(\d+) RETRIEVEs \((\d+) of them for the snapshot's records\)", proc.stdout)
    # the file's own bytes in a few ranged RETRIEVEs; the records on its path
    # (map index and page, snapshot, two directories, each once to count and
    # once to restore) a ranged RETRIEVE or two each
    assert m and int(m.group(1)) - int(m.group(2)) <= 4 and int(m.group(2)) <= 24, output(proc)
    assert re.search(r"\b1 files\b", proc.stdout), output(proc)

    original = os.path.join(mix["src"], os.path.relpath(rel, "mix"))
    restored = os.path.join(tmp_path, "dest", rel)
    with open(original, "rb") as a, open(restored, "rb") as b:
        assert a.read() == b.read()
    assert os.stat(original).st_mtime_ns == os.stat(restored).st_mtime_ns
    assert os.stat(original).st_mode == os.stat(restored).st_mode
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "dest") for f in fs]
    assert files == [restored]
    # the nodes sent about the file's own bytes and the records on its path
    # (root record, map, snapshot, its directories), never a whole tar or
    # bundle share
    sent = (_total(after, "server", "bytes_retrieved_out")
            - _total(before, "server", "bytes_retrieved_out"))
    retrieves = (_total(after, "server", "retrieves") - _total(before, "server", "retrieves"))
    assert retrieves == int(m.group(1))
    assert size <= sent <= size + 64 * 1024, (size, sent)


# ---- a node killed in the middle of archive appends ----------------------------------

class Writer:
    """peer_tool archive-writer in a subprocess; collects acknowledged tars."""

    def __init__(self, addr, home, seed, max_tars):
        self.proc = tool_popen("archive-writer", addr, home, seed, 48, 96 * 1024, max_tars)
        self.acked = []
        self.errors = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                record = {"unexpected output": line}
            if "members" in record:
                self.acked.append(record["members"])
            else:
                self.errors.append(record)

    def finish(self, timeout=60):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self._thread.join(timeout=10)
            self.proc.stdout.close()
            self.proc.stderr.close()
        return [key for tar in self.acked for key in tar]


def _archive(node_home) -> str:
    found = glob.glob(os.path.join(node_home, "store", "archives", "*.tar"))
    assert len(found) == 1, found
    return found[0]


def _committed_length(node_home) -> int:
    """The index's committed length, read from a copy (the node may be dead,
    with a WAL to replay: the copy replays it, the original is not touched)."""
    store = os.path.join(node_home, "store")
    copy = os.path.join(node_home, "index-copy")
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(os.path.join(store, "index.sqlite" + suffix)):
            shutil.copy(os.path.join(store, "index.sqlite" + suffix), copy)
    db = sqlite3.connect(os.path.join(copy, "index.sqlite"))
    try:
        rows = db.execute("SELECT committed_length FROM archives").fetchall()
    finally:
        db.close()
        shutil.rmtree(copy, ignore_errors=True)
    assert len(rows) == 1, rows
    return rows[0][0]


def _check_readable(node, client_home, keys, tmp_path):
    keyfile = tmp_path / "keys.txt"
    keyfile.write_text("\n".join(keys) + "\n")
    result = tool("retrieve", node.addr, client_home, keyfile, timeout=120)
    bad = {k: v for k, v in result.items() if v != "ok"}
    assert not bad, f"{len(bad)} acknowledged member(s) lost after the crash: {list(bad.items())[:5]}"


def test_sigkill_in_the_middle_of_archive_appends(tmp_path):
    client = str(tmp_path / "client")
    node = NodeProcess(tmp_path / "node")
    nodes = [node]
    acked = []
    torn = 0
    try:
        node.wait_ready()
        port = node.port
        rounds = 0
        while rounds < 3 or (not torn and rounds < 6):   # bounded: at most 6 kills
            round_number = rounds
            rounds += 1
            writer = Writer(node.addr, client, seed=round_number, max_tars=500)
            wanted = 2 + round_number
            wait_until(lambda: len(writer.acked) >= wanted or writer.proc.poll() is not None,
                       30, f"{wanted} acknowledged archive STOREs")
            assert writer.proc.poll() is None, writer.proc.stderr.read()
            # SIGKILL the moment the archive grows: an append is under way
            archive = _archive(node.home)
            seen = os.path.getsize(archive)
            wait_until(lambda: os.path.getsize(archive) != seen or writer.proc.poll() is not None,
                       30, "the next archive append", interval=0.0005)
            node.stop(signal.SIGKILL)
            acked += writer.finish()
            assert writer.errors, "the writer did not notice the node die"

            size = os.path.getsize(_archive(node.home))
            committed = _committed_length(node.home)
            assert size >= committed, f"the archive lost committed bytes: {size} < {committed}"
            torn += size > committed

            node = NodeProcess(node.home, port=port)    # same home, same port
            nodes.append(node)
            node.wait_ready()
            assert os.path.getsize(_archive(node.home)) == _committed_length(node.home)
            assert os.listdir(os.path.join(node.home, "store", "incoming")) == []
            _check_readable(node, client, acked, tmp_path)

        # a torn tail for certain: half a tar header after the committed end
        node.stop(signal.SIGKILL)
        with open(_archive(node.home), "ab") as f:
            f.write(b"\x00" * 300 + b"garbage of an append that never committed")
        node = NodeProcess(node.home, port=port)
        nodes.append(node)
        node.wait_ready()
        assert os.path.getsize(_archive(node.home)) == _committed_length(node.home)
        with open(os.path.join(node.home, "node.log")) as f:
            assert re.search(r"cutting \d+ uncommitted bytes", f.read())

        # appends after the repair land where the index says they are
        writer = Writer(node.addr, client, seed=99, max_tars=3)
        fresh = writer.finish()
        assert len(writer.acked) == 3 and not writer.errors, writer.errors
        _check_readable(node, client, acked + fresh, tmp_path)
        print(f"{len(acked)} acknowledged members survived {rounds} SIGKILLs; "
              f"{torn} of them left a torn archive tail")
        assert torn, "no SIGKILL landed inside an append (the archive never had a torn tail)"
    finally:
        for proc in nodes:
            if proc.alive():
                proc.stop(signal.SIGKILL)
