"""SafeDest: every path under DEST is walked without following a symlink."""
import mmap
import os

import pytest

from flud.client.restore import destdir
from flud.client.restore.destdir import SafeDest, UnsafePath
from flud.client.directio import PositionalWriter


@pytest.fixture
def dest(tmp_path):
    with SafeDest(str(tmp_path / "dest")) as safe:
        yield safe


def listing(path) -> list:
    return sorted(os.listdir(path))


def test_plain_paths_create_their_parents_and_a_new_file(dest, tmp_path):
    with dest.place("a/b/c.txt") as place:
        assert place.name == "c.txt" and not place.exists()
        fd = place.open_new(place.name, 0o640)
        os.write(fd, b"hello")
        os.close(fd)
    assert (tmp_path / "dest" / "a" / "b" / "c.txt").read_bytes() == b"hello"
    dest.make_dir("a/b")  # an existing real directory is fine
    dest.make_dir("x/y")
    assert (tmp_path / "dest" / "x" / "y").is_dir()


def test_a_symlinked_directory_component_is_refused(dest, tmp_path, outside):
    os.symlink(str(outside), tmp_path / "dest" / "tree")
    for attempt in (lambda: dest.place("tree/f"), lambda: dest.make_dir("tree/sub"),
                    lambda: dest.place("tree/sub/deeper/f"),
                    lambda: dest.set_dir_meta("tree/sub", 0o755, 0)):
        with pytest.raises(UnsafePath) as err:
            attempt()
        assert "tree" in str(err.value) and "symlink" in str(err.value)
        assert err.value.rel.startswith("tree")
    assert listing(outside) == ["precious"]


def test_a_symlink_as_the_final_component_is_never_followed(dest, tmp_path, outside):
    os.makedirs(tmp_path / "dest" / "a")
    os.symlink(str(outside / "precious"), tmp_path / "dest" / "a" / "file-link")
    os.symlink(str(outside), tmp_path / "dest" / "a" / "dir-link")
    with dest.place("a/file-link") as place:
        assert place.exists()  # the link itself: restored beside, never through it
        with pytest.raises(FileExistsError):
            place.open_new("file-link", 0o600)
        with pytest.raises(FileExistsError):
            PositionalWriter("file-link", dir_fd=place.dir_fd)
    with pytest.raises(UnsafePath, match="symlink"):
        dest.make_dir("a/dir-link")
    with pytest.raises(UnsafePath, match="symlink"):
        dest.set_dir_meta("a/dir-link", 0o777, 0)
    assert (outside / "precious").read_bytes() == b"not yours"
    assert listing(outside) == ["precious"]


def test_a_dangling_symlink_as_the_final_component_is_not_created_through(dest, tmp_path,
                                                                          outside):
    os.symlink(str(outside / "new"), tmp_path / "dest" / "dangling")
    with dest.place("dangling") as place:
        assert place.exists()
        with pytest.raises(FileExistsError):
            place.open_new("dangling", 0o600)
    assert listing(outside) == ["precious"]


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "a/..", "..", "/etc/passwd", "a//b",
                                 "a/./b", ".", "", "a/b/", "a\0b"])
def test_names_that_leave_or_blur_the_path_are_refused(dest, rel):
    with pytest.raises(UnsafePath):
        dest.place(rel)
    with pytest.raises(UnsafePath):
        dest.make_dir(rel)


def test_a_file_where_a_directory_should_be_is_refused(dest, tmp_path):
    (tmp_path / "dest" / "plain").write_bytes(b"x")
    with pytest.raises(UnsafePath, match="not a directory"):
        dest.place("plain/f")
    with pytest.raises(UnsafePath, match="not a directory"):
        dest.make_dir("plain")


def test_dest_itself_may_be_a_symlink_the_user_named(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(str(real), tmp_path / "alias")
    with SafeDest(str(tmp_path / "alias")) as safe:
        safe.make_dir("d")
    assert (real / "d").is_dir()


def test_rename_symlink_and_times_stay_in_the_parent(dest, tmp_path):
    with dest.place("d/f") as place:
        fd = place.open_new("tmp", 0o600)
        os.close(fd)
        place.rename("tmp", "f")
        place.symlink("/elsewhere", "l")
        place.set_link_times("l", 1_000_000_000)
    root = tmp_path / "dest" / "d"
    assert listing(root) == ["f", "l"]
    assert os.readlink(root / "l") == "/elsewhere"
    assert os.lstat(root / "l").st_mtime_ns == 1_000_000_000
    dest.set_dir_meta("d", 0o751, 2_000_000_000)
    st = os.stat(root)
    assert st.st_mode & 0o777 == 0o751 and st.st_mtime_ns == 2_000_000_000


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_directory_descriptors_are_cached_but_bounded(dest, monkeypatch):
    before = _open_fds()
    for i in range(destdir.DIR_CACHE * 3):
        dest.make_dir(f"d{i}/e")
        with dest.place(f"d{i}/e/f"):
            pass
    # the root, at most DIR_CACHE cached directories; nothing else left open
    assert _open_fds() - before <= destdir.DIR_CACHE
    opened = []
    real_open = os.open
    monkeypatch.setattr(destdir.os, "open",
                        lambda *a, **kw: opened.append(a[0]) or real_open(*a, **kw))
    for _ in range(5):
        with dest.place("d1/e/again"):
            pass
    assert len(opened) <= 2  # walked once, then found in the cache


def test_close_lets_go_of_every_descriptor(tmp_path):
    before = _open_fds()
    safe = SafeDest(str(tmp_path / "dest"))
    for i in range(10):
        safe.make_dir(f"d{i}/e")
    safe.close()
    assert _open_fds() == before


def test_positional_writer_opens_a_new_file_beside_its_dir_fd(dest, tmp_path):
    aligned = mmap.mmap(-1, 8192)  # page aligned: O_DIRECT where the filesystem has it
    aligned.write(b"b" * 8192)
    with dest.place("big/file") as place:
        with PositionalWriter("file.part", dir_fd=place.dir_fd) as out:
            out.write_at(8192, aligned)
            out.write_at(0, b"a" * 8192)
            out.finish(16384 + 3)
    data = (tmp_path / "dest" / "big" / "file.part").read_bytes()
    assert data == b"a" * 8192 + b"b" * 8192 + b"\0" * 3


def test_positional_writer_refuses_a_name_swapped_between_its_two_opens(dest, tmp_path,
                                                                        monkeypatch):
    from flud.client import directio

    def swapped(path, flags, dir_fd=None):
        os.rename(path, "moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd)
        os.close(fd)
        return os.open(path, flags, dir_fd=dir_fd)  # another file than the first open's

    monkeypatch.setattr(directio, "open_direct", swapped)
    with dest.place("f") as place:
        with pytest.raises(FileExistsError, match="replaced"):
            PositionalWriter("f", dir_fd=place.dir_fd)


def _no_renameat2(monkeypatch):
    monkeypatch.setattr(destdir, "_renameat2", None)


def _renameat2_unsupported(monkeypatch):
    """As on a filesystem without RENAME_NOREPLACE: the call fails EINVAL."""
    import ctypes
    import errno

    def einval(*args):
        ctypes.set_errno(errno.EINVAL)
        return -1
    monkeypatch.setattr(destdir, "_renameat2", einval)


@pytest.mark.parametrize("how", ["renameat2", "no renameat2", "EINVAL"])
def test_rename_new_never_replaces_a_name_however_it_appeared(dest, tmp_path, monkeypatch,
                                                             how):
    """A rename that replaced what appeared after a check was the race in
    "a restore never overwrites"; each way of renaming refuses a taken name
    (a file, a symlink, a directory) and moves onto a free one."""
    if how == "no renameat2":
        _no_renameat2(monkeypatch)
    elif how == "EINVAL":
        _renameat2_unsupported(monkeypatch)
    root = tmp_path / "dest" / "d"
    with dest.place("d/f") as place:
        os.close(place.open_new("tmp", 0o600))
        (root / "file").write_bytes(b"theirs")
        os.symlink("/elsewhere", root / "link")
        os.mkdir(root / "dir")
        for taken in ("file", "link", "dir"):
            with pytest.raises(FileExistsError):
                place.rename_new("tmp", taken)
        place.rename_new("tmp", "f")
    assert listing(root) == ["dir", "f", "file", "link"]
    assert (root / "file").read_bytes() == b"theirs"
    assert os.readlink(root / "link") == "/elsewhere"


def test_into_place_goes_beside_a_name_that_appeared_and_fails_when_both_are_taken(dest,
                                                                                  tmp_path):
    from flud.client.restore.file_writer import RestoreError, into_place

    root = tmp_path / "dest" / "d"
    with dest.place("d/f") as place:
        os.close(place.open_new("t1", 0o600))
        assert into_place(place, lambda name: place.rename_new("t1", name)) == ("f", False)
        os.close(place.open_new("t2", 0o600))
        assert into_place(place, lambda name: place.rename_new("t2", name)) == \
            ("f.flud-restored", True)
        os.close(place.open_new("t3", 0o600))
        with pytest.raises(RestoreError, match="exists too"):
            into_place(place, lambda name: place.rename_new("t3", name))
    assert listing(root) == ["f", "f.flud-restored", "t3"]
