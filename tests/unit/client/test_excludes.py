"""flud/client/backup/source_excludes.py: what a backup's walk leaves out, and that a pruned
directory is never listed."""
import os

import pytest

from flud.client.backup import source_excludes as excludes_module
from flud.client.backup.source_excludes import (CACHEDIR_SIGNATURE, ExcludeOptions, ExcludeRules, PatternError,
                                  parse_size)
from flud.client.backup.source_walk import walk

TAG = CACHEDIR_SIGNATURE + b"\n# This file is a cache directory tag.\n"


def listed(root, options=ExcludeOptions(), excluded=None, skipped=None):
    """relative path -> kind of every entry the walk keeps."""
    rules = ExcludeRules.of(options)
    found = {}
    on_exclude = (lambda p, why: excluded.append((os.path.relpath(p, root), why))) \
        if excluded is not None else (lambda p, why: None)
    on_skip = (lambda p, why: skipped.append((os.path.relpath(p, root), why))) \
        if skipped is not None else (lambda p, why: None)
    for directory in walk(str(root), (), on_skip, rules.lister(str(root), on_exclude)):
        for entry in directory.entries:
            found[os.path.relpath(entry.path, root)] = entry.kind
    return found


def write(root, relative, data=b"x"):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_globs_keep_their_old_meaning(tmp_path):
    write(tmp_path, "a/x.tmp")
    write(tmp_path, "a/y.txt")
    write(tmp_path, "b/.cache/z")
    found = listed(tmp_path, ExcludeRules.of(["*.tmp", "*/b/.cache"]))
    assert "a/y.txt" in found and "a/x.tmp" not in found
    assert "b/.cache" not in found and "b" in found


def test_nested_fludignore_with_negations(tmp_path):
    write(tmp_path, ".fludignore", b"*.log\n/build/\nsecret*\n")
    write(tmp_path, "app.log")
    write(tmp_path, "build/out.o")
    write(tmp_path, "src/build/keep.c")          # /build/ is anchored at the top
    write(tmp_path, "src/debug.log")
    write(tmp_path, "src/.fludignore", b"!important.log\n*.o\n")
    write(tmp_path, "src/important.log")
    write(tmp_path, "src/deep/important.log")    # the negation is unanchored: any depth
    write(tmp_path, "src/deep/x.o")
    write(tmp_path, "src/deep/.fludignore", b"important.log\n")   # deeper file wins again
    write(tmp_path, "secrets/key")
    write(tmp_path, "other/important.log")       # src's negation says nothing here
    excluded = []
    found = listed(tmp_path, excluded=excluded)
    assert dict(excluded)["src/deep/important.log"] == \
        f"matches 'important.log' ({tmp_path}/src/deep/.fludignore:1)"
    assert dict(excluded)["build"] == f"matches '/build/' ({tmp_path}/.fludignore:2)"
    assert set(found) == {".fludignore", "src", "src/.fludignore", "src/build",
                          "src/build/keep.c", "src/important.log", "src/deep",
                          "src/deep/.fludignore", "other"}


def test_ignored_directory_is_never_listed(tmp_path, monkeypatch):
    write(tmp_path, ".fludignore", b"node_modules/\n")
    for i in range(50):
        write(tmp_path, f"node_modules/pkg{i}/index.js")
    write(tmp_path, "main.js")
    listings = []
    real_scandir = os.scandir
    monkeypatch.setattr(excludes_module.os, "scandir",
                        lambda p: listings.append(p) or real_scandir(p))
    assert set(listed(tmp_path)) == {".fludignore", "main.js"}
    assert listings == [str(tmp_path)]


def test_exclude_file_relative_to_each_root(tmp_path):
    patterns = write(tmp_path, "patterns", b"# mine\n/top.iso\n*.iso\n!keep.iso\n")
    root = tmp_path / "root"
    write(root, "top.iso")
    write(root, "d/x.iso")
    write(root, "d/keep.iso")
    found = listed(root, ExcludeOptions(exclude_files=(str(patterns),)))
    assert set(found) == {"d", "d/keep.iso"}


def test_a_bad_pattern_names_its_file_and_line(tmp_path):
    write(tmp_path, "a/b/.fludignore", b"ok\n\n[unclosed\n")
    with pytest.raises(PatternError) as caught:
        listed(tmp_path)
    assert caught.value.source == str(tmp_path / "a/b/.fludignore")
    assert caught.value.line == 3
    patterns = write(tmp_path, "patterns", b"fine\n!\n")
    with pytest.raises(PatternError) as caught:
        ExcludeOptions(exclude_files=(str(patterns),)).compile()
    assert f"{patterns}:2" in str(caught.value)


def test_cache_keeps_only_its_tag_and_is_never_listed(tmp_path, monkeypatch):
    write(tmp_path, "home/.cache/CACHEDIR.TAG", TAG)
    for i in range(200):
        write(tmp_path, f"home/.cache/entry{i}")
    write(tmp_path, "home/fake/CACHEDIR.TAG", b"Signature: not the right one\n")
    write(tmp_path, "home/fake/data")
    write(tmp_path, "home/doc.txt")
    listings, stats = [], []
    real_scandir, real_lstat = os.scandir, os.lstat
    monkeypatch.setattr(excludes_module.os, "scandir",
                        lambda p: listings.append(p) or real_scandir(p))
    monkeypatch.setattr(excludes_module.os, "lstat",
                        lambda p, *a, **k: stats.append(p) or real_lstat(p, *a, **k))
    excluded = []
    found = listed(tmp_path / "home", ExcludeOptions(exclude_caches=True), excluded)
    assert set(found) == {".cache", ".cache/CACHEDIR.TAG", "doc.txt", "fake",
                          "fake/CACHEDIR.TAG", "fake/data"}
    cache = str(tmp_path / "home/.cache")
    assert cache not in listings
    # one probe of the tag, one stat of it as the kept entry: nothing else inside
    assert [p for p in stats if p.startswith(cache + "/")] == [cache + "/CACHEDIR.TAG"] * 2
    assert excluded == [(".cache", "a cache (CACHEDIR.TAG): only the tag is kept")]
    # without the option the cache is an ordinary directory
    assert len(listed(tmp_path / "home")) == 6 + 200


def test_exclude_if_present_keeps_the_directory_and_its_marker(tmp_path):
    write(tmp_path, "vm/.nobackup", b"")
    write(tmp_path, "vm/disk.img")
    write(tmp_path, "keep/file")
    found = listed(tmp_path, ExcludeOptions(if_present=(".nobackup",)))
    assert set(found) == {"vm", "vm/.nobackup", "keep", "keep/file"}
    with pytest.raises(PatternError):
        ExcludeOptions(if_present=("a/b",)).compile()


def test_larger_than(tmp_path):
    write(tmp_path, "small", b"x" * 100)
    write(tmp_path, "exact", b"x" * 1024)
    write(tmp_path, "big", b"x" * 1025)
    excluded = []
    found = listed(tmp_path, ExcludeOptions(larger_than=1024), excluded)
    assert set(found) == {"small", "exact"}
    assert excluded == [("big", "larger than --exclude-larger-than: 1025 bytes")]


def test_one_file_system_keeps_a_mount_point_empty(tmp_path, monkeypatch):
    write(tmp_path, "local/file")
    write(tmp_path, "mnt/remote/file")
    real_lstat = os.lstat
    mount = str(tmp_path / "mnt/remote")

    class Moved:
        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return self._st.st_dev + 1 if name == "st_dev" else getattr(self._st, name)

    def lstat(path, *args, **kwargs):
        st = real_lstat(path, *args, **kwargs)
        return Moved(st) if str(path).startswith(mount) else st

    monkeypatch.setattr(excludes_module.os, "lstat", lstat)
    found = listed(tmp_path, ExcludeOptions(one_file_system=True))
    assert set(found) == {"local", "local/file", "mnt", "mnt/remote"}
    assert "mnt/remote/file" in listed(tmp_path)


def test_parse_size():
    assert parse_size("2G") == 2 * 1024 ** 3
    assert parse_size("500k") == 500 * 1024
    assert parse_size("10MiB") == 10 * 1024 ** 2
    assert parse_size("123") == 123
    assert parse_size(7) == 7
    for bad in ("", "ten", "-1", True):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_fixture_home_keeps_what_the_rules_say_and_never_lists_the_cache(tmp_path, monkeypatch):
    """The fixture home of issue 28 (tools/bench/home_tree.py): a cache of
    100,000 entries is one probe and one stat of its tag, never a listing.
    (Its cost in time: tools/bench/bench_excludes.py.)"""
    from tools.bench.home_tree import make_home

    root = tmp_path / "home"
    kept = make_home(str(root), cache_entries=100_000)
    listings, stats = [], []
    real_scandir, real_lstat = os.scandir, os.lstat
    monkeypatch.setattr(excludes_module.os, "scandir",
                        lambda p: listings.append(p) or real_scandir(p))
    monkeypatch.setattr(excludes_module.os, "lstat",
                        lambda p, *a, **k: stats.append(p) or real_lstat(p, *a, **k))
    options = ExcludeOptions(exclude_caches=True, if_present=(".nobackup",),
                             larger_than=parse_size("8M"))
    assert set(listed(root, options)) == kept
    cache = str(root / ".cache")
    assert cache not in listings
    assert not [p for p in listings if p.startswith(cache + "/")]
    assert [p for p in stats if p.startswith(cache + "/")] == [cache + "/CACHEDIR.TAG"] * 2
    assert len(stats) < 100   # the markers probed in each of the few directories


def test_one_file_system_on_this_machines_own_mounts(monkeypatch):
    """/dev/shm, /dev/pts...: real mount points below /dev are kept, never listed."""
    top = "/dev"
    try:
        device = os.lstat(top).st_dev
        mounts = [os.path.join(top, e.name) for e in os.scandir(top)
                  if e.is_dir(follow_symlinks=False)
                  and e.stat(follow_symlinks=False).st_dev != device]
    except OSError:
        mounts = []
    if not mounts:
        pytest.skip("no file system mounted directly below /dev on this machine")
    listings = []
    real_scandir = os.scandir
    monkeypatch.setattr(excludes_module.os, "scandir",
                        lambda p: listings.append(p) or real_scandir(p))
    rules = ExcludeRules.of(ExcludeOptions(one_file_system=True))
    found = set()
    for directory in walk(top, (), lambda p, w: None, rules.lister(top)):
        found.update(e.path for e in directory.entries)
    for mount in mounts:
        assert mount in found and mount not in listings
        assert not [p for p in found | set(listings) if p.startswith(mount + "/")]
