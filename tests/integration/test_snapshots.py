"""Snapshots as a user sees them (issue 18), with real node processes: tags,
host and source paths in `flud ls`, `find`, `diff`, restore by the original
absolute path, and the same listing from the key alone after a total loss."""
import os
import socket

import pytest

from tests.integration.helpers import compare_trees, flud, init_client, output, write_random

pytestmark = pytest.mark.integration

NODES = 10
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def world(module_testnet_factory, tmp_path_factory):
    """Two snapshots of one tree: the second after a change, an addition
    and a removal."""
    net = module_testnet_factory(NODES, "snapshots-net")
    base = tmp_path_factory.mktemp("snapshots")
    src = base / "docs"
    for i in range(12):
        write_random(src / f"dir{i % 3}" / f"note-{i}.txt", 500 + 300 * i, i)
    write_random(src / "photos" / "big.jpg", 3 * 1024 * 1024, 99)
    home = base / "home"
    init_client(home, net)
    first = flud("backup", src, "--home", home, "--tag", "daily", "--tag", "first")
    assert first.returncode == 0, output(first)
    write_random(src / "dir0" / "note-0.txt", 4321, 1000)        # changed
    write_random(src / "dir1" / "added.txt", 77, 1001)           # added
    os.unlink(src / "dir2" / "note-2.txt")                       # removed
    second = flud("backup", src, "--home", home, "--tag", "daily")
    assert second.returncode == 0, output(second)
    return {"net": net, "src": src, "home": home, "base": base}


def test_ls_shows_time_host_paths_tags_files_and_bytes(world):
    for args in ((), ("--remote",)):
        proc = flud("ls", "--home", world["home"], *args)
        assert proc.returncode == 0, output(proc)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("snapshot")]
        assert len(lines) == 2, output(proc)
        host = socket.gethostname()[:12]
        assert all(host in line and str(world["src"]) in line for line in lines), output(proc)
        assert "[daily, first]" in lines[0] and "[daily]" in lines[1], output(proc)
        assert " 13 files" in lines[0] and " 13 files" in lines[1], output(proc)


def test_ls_of_a_path_lists_its_entries_by_name_or_absolute_path(world):
    by_name = flud("ls", "--home", world["home"], "docs/dir1")
    by_path = flud("ls", "--home", world["home"], str(world["src"] / "dir1"))
    assert by_name.returncode == by_path.returncode == 0, output(by_name) + output(by_path)
    assert by_name.stdout == by_path.stdout
    assert "docs/dir1/added.txt" in by_name.stdout and "docs/dir0" not in by_name.stdout


def test_find_searches_every_snapshot(world):
    proc = flud("find", "--home", world["home"], "note-2.txt")
    assert proc.returncode == 0, output(proc)
    hits = [line for line in proc.stdout.splitlines() if "note-2.txt" in line]
    assert len(hits) == 1 and hits[0].startswith("snapshot    1"), output(proc)
    proc = flud("find", "--home", world["home"], "docs/dir1/*.txt", "--snapshot", "2")
    assert proc.returncode == 0, output(proc)
    assert "added.txt" in proc.stdout and "5 match(es) in 1 snapshot(s)" in proc.stdout, \
        output(proc)
    none = flud("find", "--home", world["home"], "nothing-like-this")
    assert none.returncode == 1 and "0 match(es)" in none.stdout, output(none)


def test_diff_lists_added_removed_and_changed_paths(world):
    proc = flud("diff", "1", "2", "--home", world["home"])
    assert proc.returncode == 0, output(proc)
    lines = set(proc.stdout.splitlines())
    # the two directories that gained or lost an entry changed their mtime
    assert lines == {"+ docs/dir1/added.txt", "- docs/dir2/note-2.txt",
                     "M docs/dir0/note-0.txt", "M docs/dir1/", "M docs/dir2/",
                     "1 added, 1 removed, 3 changed"}, output(proc)


def test_restore_by_absolute_path_and_of_an_older_snapshot(world, tmp_path):
    proc = flud("restore", "--home", world["home"], "--to", tmp_path / "a",
                str(world["src"] / "photos"))
    assert proc.returncode == 0, output(proc)
    assert os.listdir(tmp_path / "a" / "docs") == ["photos"]
    assert compare_trees(world["src"] / "photos", tmp_path / "a" / "docs" / "photos") == []
    proc = flud("restore", "--home", world["home"], "--to", tmp_path / "b", "--snapshot", "1")
    assert proc.returncode == 0, output(proc)
    assert (tmp_path / "b" / "docs" / "dir2" / "note-2.txt").exists()
    assert not (tmp_path / "b" / "docs" / "dir1" / "added.txt").exists()


def test_a_new_home_with_the_key_alone_lists_and_restores(world, tmp_path):
    keyfile = tmp_path / "flud.key"
    env = {"FLUD_PASSPHRASE": PASSPHRASE}
    proc = flud("key", "export", "--home", world["home"], keyfile, env=env)
    assert proc.returncode == 0, output(proc)
    home = tmp_path / "new-home"
    proc = flud("init", "--home", home, "--import-key", keyfile, "--join",
                world["net"].addr(3), env=env)
    assert proc.returncode == 0, output(proc)
    local = flud("ls", "--home", home)
    assert local.returncode == 0 and "--remote" in local.stdout, output(local)
    remote = flud("ls", "--home", home, "--remote")
    assert remote.returncode == 0, output(remote)
    assert len([x for x in remote.stdout.splitlines() if x.startswith("snapshot")]) == 2
    proc = flud("restore", "--home", home, "--to", tmp_path / "dest")
    assert proc.returncode == 0, output(proc)
    assert compare_trees(world["src"], tmp_path / "dest" / "docs") == []
    # one key, one writer: the new home writes only once it adopts the head;
    # its backups then go on from the nodes' history: snapshot 3, and the
    # two before it still listed (nothing kept is dropped)
    proc = flud("adopt", "--home", home)
    assert proc.returncode == 0, output(proc)
    proc = flud("backup", tmp_path / "dest" / "docs", "--home", home)
    assert proc.returncode == 0 and "snapshot 3:" in proc.stdout, output(proc)
    remote = flud("ls", "--home", world["home"], "--remote")
    ids = [x.split()[1] for x in remote.stdout.splitlines() if x.startswith("snapshot")]
    assert ids == ["1", "2", "3"], output(remote)
