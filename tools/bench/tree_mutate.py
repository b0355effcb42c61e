"""One simulated day of changes to a generated tree (gen_tree.py --mutate DAY).

Each regular file's fate is drawn from a hash of (seed, day, its path), so the same tree
mutated for the same (seed, day) changes the same files in the same way, whatever the
order the file system lists them in. About a tenth of the files are touched each day:
7.5% changed (text edited in place: lines replaced, inserted or appended; binaries
rewritten with a size within +-25%; already-compressed files - photos, archives, PDFs -
five times less often), 2.5% get a new sibling of the same kind, 1% are removed, and
one folder in 500 gets a new subfolder. Media files and the .git folders are left alone
(the tree should not grow by hundreds of MB a day).
Changed and new files get an mtime within the day (ANCHOR + day), modes are kept.
"""
from __future__ import annotations

import hashlib
import os
import random
import stat
import time

from tree_content import ANCHOR, Pools, TEXT_KINDS, content, edit_text, kind_of_ext, pools_for

P_REMOVE = 0.01
P_CHANGE = 0.075
P_ADD = 0.025
P_NEW_FOLDER = 0.002
SKIP_DIRS = {".git"}
CHANGE_WEIGHT = {"compressed": 0.2, "media": 0.0}  # photos and archives are rarely edited


def _draw(seed: int, day: int, rel: str, what: str) -> float:
    digest = hashlib.blake2b(f"{seed}:{day}:{rel}:{what}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def _day_time(rng: random.Random, day: int) -> int:
    return (ANCHOR + (day - 1) * 86400 + rng.randrange(86400)) * 1_000_000_000 \
        + rng.randrange(1_000_000_000)


def _replace(path: str, data: bytes, mode: int, mtime: int) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".mutate~")
    with open(tmp, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), mode)
    os.replace(tmp, path)
    os.utime(path, ns=(mtime, mtime))


def mutate(root: str, seed: int, day: int, quiet: bool = True) -> dict:
    """Change the tree under root as on `day` (1, 2, ...): deterministic for (seed, day)."""
    started = time.monotonic()
    pools = pools_for(seed)
    root = os.path.abspath(root)
    counts = {"files_seen": 0, "changed": 0, "added": 0, "removed": 0, "new_folders": 0,
              "bytes_written": 0}
    touched = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        reldir = os.path.relpath(dirpath, root)
        regular = []
        for name in sorted(filenames):
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                regular.append((name, st))
        changed_here = False
        for name, st in regular:
            counts["files_seen"] += 1
            rel = os.path.join(reldir, name)
            path = os.path.join(dirpath, name)
            kind = kind_of_ext(os.path.splitext(name)[1])
            u = _draw(seed, day, rel, "fate")
            rng = random.Random(f"{seed}:{day}:{rel}")
            if u < P_REMOVE:
                os.remove(path)
                counts["removed"] += 1
                changed_here = True
            elif u < P_REMOVE + P_CHANGE * CHANGE_WEIGHT.get(kind, 1.0):
                counts["bytes_written"] += _change(pools, path, kind, st, rng, day)
                counts["changed"] += 1
                changed_here = True
            if kind != "media" and _draw(seed, day, rel, "sibling") < P_ADD:
                written = _add_sibling(pools, dirpath, name, kind, st, rng, day)
                if written is not None:
                    counts["added"] += 1
                    counts["bytes_written"] += written
                    changed_here = True
        if regular and _draw(seed, day, reldir, "folder") < P_NEW_FOLDER:
            rng = random.Random(f"{seed}:{day}:{reldir}:folder")
            folder = os.path.join(dirpath, "new-" + rng.choice(pools.vocab.content[:1200]))
            if not os.path.lexists(folder):
                os.mkdir(folder)
                counts["new_folders"] += 1
                for name, st in rng.sample(regular, min(len(regular), rng.randint(1, 5))):
                    kind = kind_of_ext(os.path.splitext(name)[1])
                    if kind != "media":
                        written = _add_sibling(pools, folder, name, kind, st, rng, day)
                        counts["added"] += written is not None
                        counts["bytes_written"] += written or 0
                touched.append((folder, rng))
                changed_here = True
        if changed_here:
            touched.append((dirpath, random.Random(f"{seed}:{day}:{reldir}:mtime")))
    for folder, rng in reversed(touched):  # after the last write into each folder
        mtime = _day_time(rng, day)
        os.utime(folder, ns=(mtime, mtime))
    counts["elapsed_s"] = round(time.monotonic() - started, 1)
    if not quiet:
        print(f"{root}: day {day} (seed {seed}): {counts['changed']} changed, {counts['added']} "
              f"added, {counts['removed']} removed of {counts['files_seen']} files, "
              f"{counts['new_folders']} new folders, {counts['bytes_written'] / 1e6:.1f} MB "
              f"written in {counts['elapsed_s']} s")
    return counts


def _change(pools: Pools, path: str, kind: str, st, rng: random.Random, day: int) -> int:
    ext = os.path.splitext(path)[1]
    if kind in TEXT_KINDS:
        with open(path, "rb") as f:
            data = edit_text(pools, kind, f.read(), rng)
    else:
        size = max(16, int(st.st_size * rng.uniform(0.75, 1.25)))
        data = content(pools, kind, ext, size, rng.getrandbits(64))
    _replace(path, data, stat.S_IMODE(st.st_mode), _day_time(rng, day))
    return len(data)


def _add_sibling(pools: Pools, folder: str, like: str, kind: str, st, rng: random.Random,
                 day: int) -> int | None:
    stem, ext = os.path.splitext(like)
    path = os.path.join(folder, f"{stem}_{rng.choice(pools.vocab.content[:1200])}{ext}")
    if os.path.lexists(path):
        return None
    size = int(max(st.st_size, 64) * rng.lognormvariate(0.0, 0.7))
    size = min(size, 8 << 20)
    data = content(pools, kind, ext, size, rng.getrandbits(64))
    _replace(path, data, stat.S_IMODE(st.st_mode), _day_time(rng, day))
    return len(data)
