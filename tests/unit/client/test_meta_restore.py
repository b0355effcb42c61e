"""What a restore does with a tree's metadata (restore/meta_restore.py), on the
fake network: hard links made again (and a restore of one link alone still
gets the file), owners and devices left alone and said when not root, an
xattr the destination refuses said and counted while the data lands."""
import errno
import os
import stat

import pytest

from flud.client.restore import meta_restore as restore_meta
from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup
from tests.unit.client.test_tree_restore import _restore

ROOT = os.geteuid() == 0


def _home(root):
    os.makedirs(root / "a")
    os.makedirs(root / "b")
    (root / "a" / "one").write_bytes(b"linked" * 100)
    os.link(root / "a" / "one", root / "b" / "two")
    os.link(root / "a" / "one", root / "b" / "three")
    (root / "tagged").write_bytes(b"tagged data")
    try:
        os.setxattr(root / "tagged", "user.note", b"kept")
    except OSError as err:
        if err.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        pytest.skip(f"the tests' temporary directory has no user xattrs ({root})")
    os.mkfifo(root / "pipe")
    if ROOT:
        os.mknod(root / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.chown(root / "tagged", 65534, 65534)


def test_hard_links_come_back_as_one_inode_and_stored_once(tmp_path):
    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    backup, _, _ = run_backup(world, [str(tmp_path / "src")])
    assert backup["bytes_read"] == 600 + len(b"tagged data")   # the linked file read once
    summary, _ = _restore(world, str(tmp_path / "out"))
    assert summary["failed"] == 0 and summary["hardlinks"] == 2
    out = tmp_path / "out" / "src"
    inodes = {os.stat(out / p).st_ino for p in ("a/one", "b/two", "b/three")}
    assert len(inodes) == 1 and os.stat(out / "a/one").st_nlink == 3
    assert (out / "b" / "two").read_bytes() == b"linked" * 100
    assert stat.S_ISFIFO(os.lstat(out / "pipe").st_mode)
    assert os.getxattr(out / "tagged", "user.note") == b"kept"


def test_one_link_restored_alone_is_a_whole_file(tmp_path):
    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    run_backup(world, [str(tmp_path / "src")])
    summary, _ = _restore(world, str(tmp_path / "out"), paths=["src/b/three"])
    assert summary["failed"] == 0 and summary["files"] == 1
    assert (tmp_path / "out" / "src" / "b" / "three").read_bytes() == b"linked" * 100


def test_without_root_owners_and_devices_are_left_and_said(tmp_path, monkeypatch):
    if not ROOT:
        pytest.skip("making a device node and giving a file away need root")
    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    run_backup(world, [str(tmp_path / "src")])
    monkeypatch.setattr(restore_meta, "is_root", lambda: False)
    summary, job = _restore(world, str(tmp_path / "out"))
    out = tmp_path / "out" / "src"
    assert os.stat(out / "tagged").st_uid == os.geteuid()     # not given away
    assert not os.path.exists(out / "null")
    assert summary["meta_not_set"] == 1
    assert job.not_set == [("src/null", "a device node: made by root only")]


def test_an_xattr_the_destination_refuses_is_said_and_the_data_restored(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    run_backup(world, [str(tmp_path / "src")])

    def refuse(*args, **kw):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
    monkeypatch.setattr(restore_meta.os, "setxattr", refuse)
    summary, job = _restore(world, str(tmp_path / "out"))
    assert summary["failed"] == 0 and summary["meta_not_set"] == 1
    assert job.not_set == [("src/tagged", "xattr user.note: Operation not supported")]
    assert (tmp_path / "out" / "src" / "tagged").read_bytes() == b"tagged data"


def test_a_snapshot_of_version_2_records_still_restores(tmp_path, monkeypatch):
    """Directory records as flud wrote them before metadata (version 2, six
    fields an entry) restore as they did."""
    import json

    from flud.client.repository import tree_records as tree
    from tools.treecmp import compare_trees

    written = []

    def version_2(record):
        written.append(record)
        value = {"v": 2, "t": "dir", "e": [e.to_wire()[:6] for e in record.entries]}
        if record.more:
            value["more"] = list(record.more)
        return json.dumps(value, separators=(",", ":")).encode("ascii")

    world = make_world(tmp_path, nodes=12)
    src = tmp_path / "src"
    os.makedirs(src / "d")
    (src / "d" / "f").write_bytes(b"old format" * 50)
    os.symlink("d/f", src / "link")
    with monkeypatch.context() as patched:
        patched.setattr(tree.DirectoryRecord, "encode", version_2)
        run_backup(world, [str(src)])
    assert len(written) == 3     # src/d, src and the snapshot's root
    summary, _ = _restore(world, str(tmp_path / "out"))
    assert summary["failed"] == 0 and summary["files"] == 1
    assert compare_trees(str(src), str(tmp_path / "out" / "src")) == []


def test_a_later_link_joins_the_restored_file_never_one_that_was_there(tmp_path):
    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    run_backup(world, [str(tmp_path / "src")])
    out = tmp_path / "out" / "src"
    os.makedirs(out / "a")
    (out / "a" / "one").write_bytes(b"the user's own")
    summary, _ = _restore(world, str(tmp_path / "out"))
    assert summary["failed"] == 0 and summary["hardlinks"] == 2
    assert (out / "a" / "one").read_bytes() == b"the user's own"
    restored = os.stat(out / "a" / "one.flud-restored")
    assert os.stat(out / "b" / "two").st_ino == restored.st_ino
    assert (out / "b" / "three").read_bytes() == b"linked" * 100


def test_owners_go_by_name_where_this_machine_knows_it_else_by_number():
    from flud.client.repository.entry_meta import Owner
    by_name = restore_meta.MetaApplier(numeric_ids=False, as_root=True)
    numeric = restore_meta.MetaApplier(numeric_ids=True, as_root=True)
    recorded = Owner(5000, 5001, "root", "root")       # root's name, another machine's numbers
    assert by_name.ids(recorded) == (0, 0)
    assert numeric.ids(recorded) == (5000, 5001)
    unknown = Owner(5000, 5001, "no-such-user-here", "")
    assert by_name.ids(unknown) == (5000, 5001)


def test_an_xattr_that_cannot_be_read_is_named_and_the_file_kept(tmp_path, monkeypatch):
    from flud.client.backup import meta_reading

    world = make_world(tmp_path, nodes=12)
    _home(tmp_path / "src")
    real = os.getxattr

    def unreadable(path, name, *args, **kw):
        if name == "user.note":
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real(path, name, *args, **kw)
    monkeypatch.setattr(meta_reading.os, "getxattr", unreadable)
    backup, _, job = run_backup(world, [str(tmp_path / "src")])
    monkeypatch.undo()
    assert backup["skipped"] == 1
    assert job.skipped == [(str(tmp_path / "src" / "tagged"),
                            "xattr user.note not kept: Permission denied")]
    summary, _ = _restore(world, str(tmp_path / "out"))
    assert (tmp_path / "out" / "src" / "tagged").read_bytes() == b"tagged data"
    assert os.listxattr(tmp_path / "out" / "src" / "tagged") == []


def test_a_file_with_holes_keeps_the_ranges_it_was_read_with(tmp_path, monkeypatch):
    """The tree takes a holed file's ranges from the index (as they were
    read), in the run that read it and in later ones, never asking the
    file again; restored, the file is whole and its holes are holes."""
    from flud.client.backup import tree_writer

    world = make_world(tmp_path, nodes=12)
    src = tmp_path / "src"
    src.mkdir()
    mib = 1024 * 1024
    with open(src / "disk.img", "wb") as f:       # 64 MiB, 2 MiB of data: the large-file path
        f.truncate(64 * mib)
        f.write(os.urandom(mib))
        f.seek(40 * mib)
        f.write(os.urandom(mib))

    def never(*args, **kw):
        raise AssertionError("ranges asked of the file again")
    monkeypatch.setattr(tree_writer, "data_ranges", never)
    first, _, _ = run_backup(world, [str(src)])
    (src / "other").write_bytes(b"a change in the directory")
    second, _, _ = run_backup(world, [str(src)])      # the directory's record made again
    assert first["skipped"] == second["skipped"] == 0
    assert first["bytes_read"] <= 2 * mib + 64 * 1024
    summary, _ = _restore(world, str(tmp_path / "out"))
    out = tmp_path / "out" / "src" / "disk.img"
    assert summary["failed"] == 0
    assert out.read_bytes() == (src / "disk.img").read_bytes()
    assert os.stat(out).st_blocks * 512 <= 3 * mib
