"""The generated home tree of tools/bench/gen_tree.py: deterministic, shaped as claimed,
compressible as claimed, and mutated a tenth a day, deterministically."""
import hashlib
import os
import shutil
import stat
import statistics
import zlib

import pytest

from tools.bench import gen_tree

FILES = 500
SEED = 7
DAY = 86400


def snapshot(root: str) -> dict:
    """Every entry by relative path: kind, mode, mtime and size, content hash or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
            else:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_size, digest)
    return out


def files_of(snap: dict) -> dict:
    return {rel: v for rel, v in snap.items() if v[0] == "file"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("gen") / "home")
    summary = gen_tree.generate(root, FILES, seed=SEED, quiet=True)
    return root, summary, snapshot(root)


def test_the_same_seed_gives_the_same_tree(tree, tmp_path):
    root, summary, snap = tree
    again = str(tmp_path / "home")
    assert gen_tree.generate(again, FILES, seed=SEED, quiet=True)["bytes"] == summary["bytes"]
    assert snapshot(again) == snap


def test_another_seed_gives_another_tree(tree, tmp_path):
    _, _, snap = tree
    other = str(tmp_path / "home")
    gen_tree.generate(other, FILES, seed=SEED + 1, quiet=True)
    snap2 = snapshot(other)
    names, names2 = set(files_of(snap)), set(files_of(snap2))
    assert len(names & names2) < 0.3 * len(names)
    digests = {v[4] for v in files_of(snap).values()}
    digests2 = {v[4] for v in files_of(snap2).values()}
    assert len(digests & digests2) < 0.1 * len(digests)


def test_counts_and_bytes_are_what_was_asked(tree):
    _, summary, snap = tree
    files = files_of(snap)
    assert summary["files"] == len(files)
    assert abs(len(files) - FILES) <= 0.02 * FILES
    assert sum(v[3] for v in files.values()) == summary["bytes"]
    assert abs(summary["bytes"] - FILES * gen_tree.BYTES_PER_FILE) <= 0.05 * summary["bytes"]


def test_the_shape_of_a_home(tree):
    root, summary, snap = tree
    files = files_of(snap)
    for kind in ("binary", "compressed", "media", "empty", "py", "md", "json"):
        assert kind in summary["kinds"], kind
    sizes = sorted(v[3] for v in files.values())
    assert 1024 <= statistics.median(sizes) <= 6 * 1024
    assert sum(s < 16 * 1024 for s in sizes) >= 0.7 * len(sizes)
    assert sizes[-1] >= 1 << 20  # a long tail: media
    assert sum(s == 0 for s in sizes) >= 3
    assert summary["empty_dirs"] >= 1
    modes = {v[1] for v in files.values()}
    assert {0o644, 0o755, 0o444} <= modes
    mtimes = [v[2] for v in files.values()]
    assert max(mtimes) - min(mtimes) > 2 * 365 * DAY * 10**9
    digests = [v[4] for v in files.values() if v[3] > 100]
    assert len(digests) - len(set(digests)) >= 3  # vendored copies, LICENSE files
    depths = [rel.count("/") for rel in files]
    assert max(depths) >= 6
    links = {rel: v for rel, v in snap.items() if v[0] == "link"}
    assert links and summary["symlinks"] == len(links)
    real_root = os.path.realpath(root)
    for rel, (_, target, _) in links.items():
        assert not os.path.isabs(target)
        resolved = os.path.realpath(os.path.join(root, os.path.dirname(rel), target))
        assert resolved.startswith(real_root + os.sep)


def ratio(root: str, rels) -> float:
    raw = packed = 0
    for rel in rels:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        raw += len(data)
        packed += len(zlib.compress(data, 6))
    return raw / packed


def test_contents_compress_like_real_ones(tree):
    root, _, snap = tree
    files = [rel for rel, v in files_of(snap).items() if v[3] > 0]

    def having(*exts):
        return [r for r in files if os.path.splitext(r)[1] in exts and "/.git/" not in r]
    assert 2.5 <= ratio(root, having(".py", ".js", ".c", ".h", ".go", ".rs", ".java")) <= 5.5
    assert 2.0 <= ratio(root, having(".md", ".txt")) <= 3.5
    assert 1.3 <= ratio(root, having(".o", ".pyc", ".class")) <= 2.2
    assert ratio(root, having(".jpg", ".png", ".pdf", ".zip", ".docx", ".xlsx", ".odt")) < 1.01
    media = having(".mp4", ".mkv", ".mov", ".flac")
    assert media and ratio(root, media) < 1.01


def test_mutate_touches_a_tenth_deterministically(tree, tmp_path):
    root, _, snap = tree
    copies = []
    for name in ("a", "b"):
        copy = str(tmp_path / name)
        shutil.copytree(root, copy, symlinks=True)
        copies.append(copy)
    counts = gen_tree.mutate(copies[0], SEED, 1)
    gen_tree.mutate(copies[1], SEED, 1)
    after = snapshot(copies[0])
    assert snapshot(copies[1]) == after

    before, now = files_of(snap), files_of(after)
    removed = set(before) - set(now)
    added = set(now) - set(before)
    changed = {r for r in set(before) & set(now) if before[r][4] != now[r][4]}
    assert len(removed) == counts["removed"] >= 1
    assert len(added) == counts["added"] >= 1
    assert len(changed) <= counts["changed"]  # an edit may, rarely, give the same bytes
    assert 0.05 * len(before) <= len(changed) + len(added) <= 0.16 * len(before)
    day1 = gen_tree.ANCHOR * 10**9
    for rel in added | changed:
        assert day1 <= now[rel][2] < day1 + DAY * 10**9
        assert now[rel][1] == (before[rel][1] if rel in before else now[rel][1])

    other = str(tmp_path / "c")
    shutil.copytree(root, other, symlinks=True)
    gen_tree.mutate(other, SEED, 2)
    assert snapshot(other) != after
