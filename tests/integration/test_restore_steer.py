"""A restore a user can steer and resume (issue 28, item 3), with real node
processes: a restore killed at about half its bytes and resumed with
`--overwrite if-changed` fetches only what had not landed and leaves nothing
beside; `flud dump` streams a large file's exact bytes in bounded memory;
`--include`/`--exclude`/`--delete` from the command line.

The full-size figures (4,000 files, 250 MB; a 1 GiB dump) are
tools/bench/bench_restore.py's."""
import hashlib
import json
import os
import subprocess
import tarfile

import pytest

from tests.integration.helpers import (PYTHON, ROOT, compare_trees, flud, init_client, output,
                                       write_random)
from tools.restore_resume import (kill_midway, leftovers, make_tree, resume,
                                  resume_limit)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
SEGMENT = 2 * MIB
NODES = 6
K, N = 2, 4
TREE_FILES, TREE_BYTES, TREE_LARGE = 400, 25_000_000, 4


@pytest.fixture(scope="module")
def backed_up(module_testnet_factory, tmp_path_factory):
    """A 400-file, ~25 MB tree (four large files) and a 32 MiB file, backed up."""
    net = module_testnet_factory(NODES, "restore-steer-net")
    base = tmp_path_factory.mktemp("steer")
    tree, home = base / "tree", base / "home"
    total = make_tree(str(tree), TREE_FILES, TREE_BYTES, TREE_LARGE, seed=28)
    write_random(str(base / "one" / "big.bin"), 32 * MIB + 333, 7)
    init_client(home, net, None, "--k", K, "--n", N)
    proc = flud("backup", tree, base / "one", "--home", home)
    assert proc.returncode == 0, output(proc)
    return base, home, total


def test_an_interrupted_restore_resumes_fetching_only_what_did_not_land(backed_up):
    base, home, total = backed_up
    dest = str(base / "resumed")
    # Throttled, so that a poll every 20 ms catches it near half even on a
    # loaded machine (25 MB in ~3 s); the resumed run is not.
    killed = kill_midway(str(home), dest, total, fraction=0.5,
                         extra=["tree", "--limit-download", "8M"])
    assert 0.5 <= killed["fraction"] < 0.75, killed
    code, summary, stderr = resume(str(home), dest, extra=["tree"])
    assert code == 0, stderr
    fetched = summary["fetched_bytes"]
    in_flight = killed["large_in_flight"]
    # The target (killed at about half: 55% plus a segment per large
    # file in flight), and the same measured from what had actually landed.
    assert fetched <= 0.55 * total + in_flight * SEGMENT, (fetched, killed, summary)
    assert fetched <= resume_limit(total, killed["fraction"], in_flight, SEGMENT), \
        (fetched, killed, summary)
    # what landed was used: files in place kept, temps renamed or completed
    assert summary["unchanged"] + summary["resumed"] > 0 and summary["beside"] == 0
    assert leftovers(dest) == []   # no NAME.flud-restored, no temp left
    assert compare_trees(base / "tree", os.path.join(dest, "tree")) == []


def test_dump_streams_a_large_file_in_bounded_memory(backed_up):
    base, home, _ = backed_up
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([PYTHON, "-m", "flud", "dump", "--home", str(home), "--json",
                             str(base / "one" / "big.bin")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT,
                            env=env, start_new_session=True)
    digest, size = hashlib.sha256(), 0
    while True:
        chunk = proc.stdout.read(1 << 20)
        if not chunk:
            break
        digest.update(chunk)
        size += len(chunk)
    stderr = proc.stderr.read().decode()
    assert proc.wait(120) == 0, stderr
    with open(base / "one" / "big.bin", "rb") as f:
        assert digest.hexdigest() == hashlib.file_digest(f, "sha256").hexdigest()
    assert size == 32 * MIB + 333
    # --json: stdout stays the file's bytes (checked above), the summary is
    # stderr's last line
    summary = json.loads(stderr.strip().splitlines()[-1])
    assert (summary["type"], summary["command"], summary["exit"]) == ("summary", "dump", 0)
    assert summary["bytes"] == 32 * MIB + 333 and summary["files"] == 1
    rss, static = summary["memory"]["peak_rss"], summary["memory"]["static_rss"]
    # a segment fetched, QUEUE_BYTES waiting and the connections' buffers:
    # half the 32 MiB file or less, whatever its size
    assert rss - static <= 16 * MIB, stderr


def test_dump_of_a_directory_is_a_tar_of_it(backed_up):
    base, home, _ = backed_up
    proc = subprocess.run([PYTHON, "-m", "flud", "dump", "--home", str(home), "tree/d03"],
                          capture_output=True, stdin=subprocess.DEVNULL, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    out = base / "untarred"
    import io
    with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r|") as tar:
        tar.extractall(out, filter="tar")
    # the bytes and modes exactly; the times as tarfile's extraction sets
    # them (a float of seconds: microseconds, not the nanoseconds dumped)
    src, got = base / "tree" / "d03", out / "d03"
    names = sorted(os.path.relpath(os.path.join(d, n), src)
                   for d, _, files in os.walk(src) for n in files)
    assert names and names == sorted(os.path.relpath(os.path.join(d, n), got)
                                     for d, _, files in os.walk(got) for n in files)
    for name in names:
        a, b = os.stat(src / name), os.stat(got / name)
        assert (src / name).read_bytes() == (got / name).read_bytes(), name
        assert a.st_mode == b.st_mode and abs(a.st_mtime - b.st_mtime) < 1e-3, name


def _last_json(proc) -> dict:
    """The summary: the last of a --json run's JSON lines (docs/json.md)."""
    lines = proc.stdout.strip().splitlines()
    assert lines, output(proc)
    return json.loads(lines[-1])


def test_include_exclude_and_delete_from_the_command_line(backed_up):
    base, home, _ = backed_up
    dest = base / "picked"
    proc = flud("restore", "--home", home, "--to", dest, "--include", "/tree/d01/",
                "--include", "**/d02/s1/", "--exclude", "s3/", "--json")
    assert proc.returncode == 0, output(proc)
    got = sorted(os.path.relpath(os.path.join(d, n), dest)
                 for d, _, names in os.walk(dest) for n in names)
    assert got and all(p.startswith(("tree/d01/", "tree/d02/s1/")) for p in got)
    assert not any("/s3/" in p for p in got)
    assert any(p.startswith("tree/d02/s1/") for p in got)
    stray = dest / "tree" / "d01" / "s0" / "stray.txt"
    stray.write_text("not in the snapshot")
    refused = flud("restore", "--home", home, "--to", dest, "--delete", "--json")
    assert refused.returncode == 2 and "--overwrite" in refused.stderr, output(refused)
    assert stray.exists()
    dry = flud("restore", "--home", home, "--to", dest, "tree/d01", "--delete",
               "--overwrite", "if-changed", "--dry-run", "--json")
    assert dry.returncode == 0, output(dry)
    planned = _last_json(dry)
    assert planned["deleted_paths"] == ["tree/d01/s0/stray.txt"] and stray.exists()
    # d01/s3 was excluded by the first restore: its files would come now
    assert planned["dry_run"] and planned["unchanged"] > 0 and planned["new"] > 0
    assert planned["fetch_bytes"] > 0
    proc = flud("restore", "--home", home, "--to", dest, "tree/d01", "--delete",
                "--overwrite", "if-changed", "--json")
    assert proc.returncode == 0, output(proc)
    summary = _last_json(proc)
    assert summary["deleted_paths"] == ["tree/d01/s0/stray.txt"] and not stray.exists()
    assert summary["fetched_bytes"] > 0 and summary["unchanged"] > 0
    assert compare_trees(base / "tree" / "d01", dest / "tree" / "d01") == []
    bad = flud("restore", "--home", home, "--to", dest, "--exclude", "a[", "--json")
    assert bad.returncode == 2 and _last_json(bad)["error"]["code"] == "BAD_PATTERN", \
        output(bad)
