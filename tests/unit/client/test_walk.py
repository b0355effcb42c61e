"""The directory walk of version-2 backups: each directory after everything
below it, with its own entries, and no more than the current path held."""
import os
import socket

from flud.client.backup.source_scan import scan
from flud.client.records import FIFO
from flud.client.backup.source_walk import list_children, walk


def make_tree(root):
    for d in ("a/b/c", "a/d", "e"):
        os.makedirs(root / d)
    for f, data in (("top.txt", b"1"), ("a/x", b"22"), ("a/b/c/deep", b"333"), ("e/y", b"")):
        (root / f).write_bytes(data)
    os.symlink("top.txt", root / "link")
    os.mkfifo(root / "a/pipe")   # kept as metadata (a FIFO), not skipped
    with socket.socket(socket.AF_UNIX) as sock:   # a socket is skipped and said
        sock.bind(str(root / "a/sock"))


def test_every_directory_comes_after_all_directories_below_it(tmp_path):
    make_tree(tmp_path)
    order = [os.path.relpath(d.path, tmp_path) for d in walk(str(tmp_path))]
    assert order == ["a/b/c", "a/b", "a/d", "a", "e", "."]


def test_each_directory_lists_its_own_entries_as_the_whole_scan_sees_them(tmp_path):
    make_tree(tmp_path)
    skipped = []
    listed = {d.path: d for d in walk(str(tmp_path), on_skip=lambda p, w: skipped.append(p))}
    scanned = scan([str(tmp_path)])
    by_parent = {}
    for entry in scanned.entries:
        if entry.path != str(tmp_path):
            by_parent.setdefault(os.path.dirname(entry.path), []).append(entry)
    assert {p: [e.path for e in d.entries] for p, d in listed.items() if d.entries} == \
        {p: [e.path for e in es] for p, es in by_parent.items()}
    assert [e.size for e in listed[str(tmp_path / "a/b/c")].entries] == [3]
    assert skipped == [str(tmp_path / "a/sock")]
    assert [e.kind for e in listed[str(tmp_path / "a")].entries if e.path.endswith("pipe")] \
        == [FIFO]


def test_excludes_and_unreadable_directories_are_left_out_and_said(tmp_path):
    make_tree(tmp_path)
    os.chmod(tmp_path / "e", 0)
    skipped = []
    try:
        listed = {os.path.relpath(d.path, tmp_path): d
                  for d in walk(str(tmp_path), excludes=["d"],
                                on_skip=lambda p, why: skipped.append((p, why)))}
    finally:
        os.chmod(tmp_path / "e", 0o755)
    assert "a/d" not in listed and "d" not in [e.path for e in listed["a"].entries]
    if os.geteuid() != 0:  # root lists a mode-0 directory anyway
        assert (str(tmp_path / "e"), "cannot list: Permission denied") in skipped


def test_a_root_that_is_a_file_or_missing_yields_no_directory(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    skipped = []
    assert list(walk(str(tmp_path / "f"))) == []
    assert list(walk(str(tmp_path / "missing"), on_skip=lambda p, w: skipped.append(p))) == []
    assert skipped == [str(tmp_path / "missing")]


def test_only_the_current_path_is_held(tmp_path):
    """A wide, deep tree: the listings open at once never exceed the depth."""
    for i in range(30):
        os.makedirs(tmp_path / f"d{i:02d}" / "x" / "y")
    open_now, most = [0], [0]

    def counting(path, excludes, on_skip):
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])
        return list_children(path, excludes, on_skip)

    for _ in walk(str(tmp_path), list_children=counting):
        open_now[0] -= 1
    assert open_now[0] == 0 and most[0] == 4   # the root, d??, x, y
