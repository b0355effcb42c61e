"""Excludes, --dry-run and --stdin-from-command against real nodes (issue 28,
items 1 and 4).

One small testnet and one client home are shared by the module; the tests
run in order (each builds on the snapshots before it).
"""
import json
import os

import pytest

from tests.integration.helpers import flud, init_client, manifest_of, output
from tools.bench.home_tree import EXCLUDE_FLAGS, kept_files, make_home

pytestmark = pytest.mark.integration

NODES, K, N = 5, 2, 4
CACHE_ENTRIES = 2_000      # the 100,000 of the issue: tests/unit/client/test_excludes.py


@pytest.fixture(scope="module")
def setup(module_testnet_factory, tmp_path_factory):
    net = module_testnet_factory(NODES, "excludes-net")
    base = tmp_path_factory.mktemp("excludes")
    src, home = base / "home", base / "client"
    kept = make_home(str(src), cache_entries=CACHE_ENTRIES)
    (base / "patterns").write_text("# mine\n*.iso\n")
    (src / "docs" / "disc.iso").write_bytes(b"iso" * 100)
    init_client(home, net, None, "--k", K, "--n", N)
    flags = [*EXCLUDE_FLAGS, "--exclude-file", str(base / "patterns")]
    return {"src": src, "home": home, "kept": kept, "flags": flags, "base": base}


def backup(setup, *extra, expect=0):
    proc = flud("backup", setup["src"], "--home", setup["home"], *setup["flags"], *extra,
                "--json")
    assert proc.returncode == expect, output(proc)
    # JSON lines (docs/json.md): the summary last; a dry run's "file" lines as its files
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    files = [line for line in lines if line["type"] == "file"]
    return {**lines[-1], **({"files": files} if "--dry-run" in extra else {})}


def snapshot_files(setup, snapshot=None) -> dict:
    """relative path (under the backed-up root) -> size, of the snapshot's files."""
    name = os.path.basename(str(setup["src"]))
    return {rel[len(name) + 1:]: size for rel, kind, _, _, size, *_ in
            manifest_of(setup["home"], snapshot)["entries"] if kind == "file"}


def snapshots(setup) -> list:
    proc = flud("ls", "--home", setup["home"], "--json")
    assert proc.returncode == 0, output(proc)
    return json.loads(proc.stdout)["snapshots"]


def relative(setup, files) -> dict:
    root = str(setup["src"]) + "/"
    return {f["path"][len(root):]: f for f in files}


def index_bytes(setup) -> bytes:
    """The client index as on disk (with its write-ahead log, if any)."""
    return b"".join(open(path, "rb").read() for path in (
        os.path.join(setup["home"], name) for name in ("index.sqlite", "index.sqlite-wal"))
        if os.path.exists(path))


def test_dry_run_lists_exactly_what_the_backup_then_stores(setup):
    before = index_bytes(setup)
    dry = backup(setup, "--dry-run")
    assert index_bytes(setup) == before      # nothing written to the client index
    listed = relative(setup, dry["files"])
    assert set(listed) == kept_files(setup["kept"])
    assert {f["status"] for f in listed.values()} == {"new"}
    assert dry["new"] == len(listed) and dry["changed"] == dry["unchanged"] == 0
    assert dry["new_bytes"] == sum(f["size"] for f in listed.values())
    assert dry["excluded"] >= 9 and dry["skipped"] == 0 and dry["exit"] == 0
    assert snapshots(setup) == []

    real = backup(setup)
    assert (real["new"], real["changed"], real["unchanged"], real["skipped"]) == \
        (dry["new"], 0, 0, 0)
    assert real["excluded"] == dry["excluded"]
    big = str(setup["src"] / "videos" / "holiday.mkv")
    assert real["too_large_paths"] == [[big, f"larger than --exclude-larger-than: {64 << 20} bytes"]]
    stored = snapshot_files(setup)
    assert stored == {path: f["size"] for path, f in listed.items()}
    assert stored[".cache/CACHEDIR.TAG"] > 0 and "docs/disc.iso" not in stored

    # a change and a new file: the dry run names them, the backup stores them
    (setup["src"] / "docs" / "notes.md").write_bytes(b"# notes, longer now\n")
    (setup["src"] / "docs" / "new.txt").write_bytes(b"new\n")
    before = index_bytes(setup)
    dry = backup(setup, "--dry-run")
    assert index_bytes(setup) == before
    assert {p: f["status"] for p, f in relative(setup, dry["files"]).items()} == {
        "docs/notes.md": "changed", "docs/new.txt": "new"}
    assert (dry["new"], dry["changed"], dry["unchanged"]) == (1, 1, len(listed) - 1)
    assert (dry["new_bytes"], dry["changed_bytes"]) == (4, 20)
    real = backup(setup)
    assert (real["new"], real["changed"], real["unchanged"]) == (1, 1, len(listed) - 1)
    again = backup(setup, "--dry-run")
    assert again["files"] == [] and again["unchanged"] == len(listed) + 1


def test_a_bad_ignore_pattern_stops_the_backup_naming_file_and_line(setup):
    before = snapshots(setup)
    bad = setup["src"] / "project" / "sub" / ".fludignore"
    good = bad.read_bytes()
    bad.write_bytes(good + b"[oops\n")
    try:
        # (the dry run's answer: tests/unit/cli/test_backup_dry_run.py)
        proc = flud("backup", setup["src"], "--home", setup["home"], *setup["flags"])
        assert proc.returncode == 2, output(proc)
        assert f"{bad}:2: bad pattern '[oops'" in proc.stderr, output(proc)
    finally:
        bad.write_bytes(good)
    assert snapshots(setup) == before


def test_stdin_from_command(setup, tmp_path):
    before = snapshots(setup)
    # a failing command: no snapshot, a clear error, and its spool is gone
    proc = flud("backup", "--home", setup["home"], "--stdin-from-command",
                "--stdin-filename", "db.sql", "--", "sh", "-c", "echo partial; exit 3")
    assert proc.returncode == 2, output(proc)
    assert "exited with 3" in proc.stderr and "no snapshot" in proc.stderr, output(proc)
    assert snapshots(setup) == before
    assert os.listdir(os.path.join(setup["home"], "stdin")) == []

    script = "import sys\nfor i in range(60000): sys.stdout.write(f'row {i}\\n')\n"
    proc = flud("backup", "--home", setup["home"], "--stdin-from-command", "--stdin-filename",
                "db.sql", "--json", "--", "python3", "-c", script)
    assert proc.returncode == 0, output(proc)
    summary = json.loads(proc.stdout.splitlines()[-1])   # the summary line
    expected = "".join(f"row {i}\n" for i in range(60000)).encode()
    assert summary["stdin"] == {"command": ["python3", "-c", script], "filename": "db.sql",
                                "bytes": len(expected)}
    assert os.listdir(os.path.join(setup["home"], "stdin")) == []
    entries = manifest_of(setup["home"], summary["snapshot"])["entries"]
    assert [(rel, kind, size) for rel, kind, _, _, size, *_ in entries] == [
        ("db.sql", "file", len(expected))]
    proc = flud("restore", "--home", setup["home"], "--snapshot", summary["snapshot"],
                "--to", tmp_path / "out")
    assert proc.returncode == 0, output(proc)
    assert (tmp_path / "out" / "db.sql").read_bytes() == expected
