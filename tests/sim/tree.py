"""The source tree of a simulated history: a model in memory (what the
harness expects a snapshot to hold) and its copy on disk (what the real
backup reads), kept equal by every change.

Times are the simulation's, never the machine's: every entry's mtime is set
from the model after each change, so a seed makes the same directory records
(and so the same blob ids, bundles and placements) on every run.
"""
import os
import stat

import blake3

KIB = 1024


class TreeModel:
    """rel path -> entry; an entry is ["dir", mode, mtime_ns],
    ["file", bytes, mode, mtime_ns] or ["link", target, mtime_ns].
    The root directory itself is "" (always there)."""

    def __init__(self, root: str, rng, clock_ns, large_from: int):
        self.root = root
        self.rng = rng
        self.clock_ns = clock_ns        # () -> the simulated time in ns (strictly rising)
        self.large_from = large_from    # bytes from which a file is "large" (small_file_limit)
        self.entries = {"": ["dir", 0o755, clock_ns()]}
        self.graveyard = []             # bytes of deleted files, to bring back
        os.makedirs(root, exist_ok=True)

    # ---- what the model says ------------------------------------------------

    def dirs(self):
        return sorted(p for p, e in self.entries.items() if e[0] == "dir")

    def files(self):
        return sorted(p for p, e in self.entries.items() if e[0] == "file")

    def expected(self) -> dict:
        """What a snapshot taken now must restore: rel path -> (kind, digest, mode)."""
        return {path: _summary(entry) for path, entry in self.entries.items()}

    # ---- changes (each one on disk and in the model) ------------------------

    def _touch_parent(self, path: str) -> None:
        parent = os.path.dirname(path)
        self.entries[parent][2] = self.clock_ns()

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path) if path else self.root

    def _write(self, path: str, data: bytes, mode: int) -> None:
        full = self._abs(path)
        existed = path in self.entries
        with open(full, "r+b" if existed else "wb") as f:
            f.write(data)
            f.truncate()
        os.chmod(full, mode)
        self.entries[path] = ["file", data, mode, self.clock_ns()]
        if not existed:
            self._touch_parent(path)

    def _new_name(self, folder: str, stem: str) -> str:
        for i in range(10_000):
            name = f"{stem}{self.rng.randrange(1000)}"
            path = f"{folder}/{name}" if folder else name
            if path not in self.entries:
                return path
        raise RuntimeError("no free name")

    def add_file(self) -> str:
        folder = self.rng.choice(self.dirs())
        path = self._new_name(folder, "f")
        size = self.rng.choice([0, 1, 100, 3 * KIB, 20 * KIB, self.large_from - 1])
        self._write(path, self.rng.randbytes(size), self.rng.choice([0o644, 0o600]))
        return f"add {path} ({size} B)"

    def add_large(self) -> str:
        folder = self.rng.choice(self.dirs())
        path = self._new_name(folder, "big")
        size = self.large_from + self.rng.randrange(2, 6) * self.large_from
        self._write(path, self.rng.randbytes(size), 0o644)
        return f"add large {path} ({size} B)"

    def add_dir(self) -> str:
        folder = self.rng.choice(self.dirs())
        path = self._new_name(folder, "d")
        os.mkdir(self._abs(path))
        mode = self.rng.choice([0o755, 0o700])
        os.chmod(self._abs(path), mode)
        self.entries[path] = ["dir", mode, self.clock_ns()]
        self._touch_parent(path)
        return f"mkdir {path}"

    def add_link(self) -> str:
        folder = self.rng.choice(self.dirs())
        path = self._new_name(folder, "l")
        target = self.rng.choice(["../x", "nowhere", "f1"])
        os.symlink(target, self._abs(path))
        self.entries[path] = ["link", target, self.clock_ns()]
        self._touch_parent(path)
        return f"symlink {path} -> {target}"

    def delete(self) -> str:
        files = self.files()
        if not files:
            return self.add_file()
        path = self.rng.choice(files)
        self.graveyard.append(self.entries[path][1])
        os.unlink(self._abs(path))
        del self.entries[path]
        self._touch_parent(path)
        return f"delete {path}"

    def delete_dir(self) -> str:
        dirs = [d for d in self.dirs() if d]
        if not dirs:
            return self.delete()
        victim = self.rng.choice(dirs)
        for path in sorted(self.entries, reverse=True):
            if path == victim or path.startswith(victim + "/"):
                entry = self.entries.pop(path)
                full = self._abs(path)
                if entry[0] == "dir":
                    os.rmdir(full)
                else:
                    if entry[0] == "file":
                        self.graveyard.append(entry[1])
                    os.unlink(full)
        self._touch_parent(victim)
        return f"rm -r {victim}"

    def edit(self) -> str:
        """In place, same size: only the mtime (and ctime) tell."""
        files = [p for p in self.files() if self.entries[p][1]]
        if not files:
            return self.add_file()
        path = self.rng.choice(files)
        data = bytearray(self.entries[path][1])
        for _ in range(self.rng.randint(1, 8)):
            data[self.rng.randrange(len(data))] ^= 0xA5
        self._write(path, bytes(data), self.entries[path][2])
        return f"edit {path}"

    def append(self) -> str:
        """A growing log: bytes added at the end of a large file."""
        large = [p for p in self.files() if len(self.entries[p][1]) >= self.large_from]
        if not large:
            return self.add_large()
        path = self.rng.choice(large)
        grow = self.rng.choice([1, 1000, self.large_from // 2, self.large_from])
        data = self.entries[path][1] + self.rng.randbytes(grow)
        self._write(path, data, self.entries[path][2])
        return f"append {grow} B to {path} (now {len(data)} B)"

    def chmod(self) -> str:
        files = self.files()
        if not files:
            return self.add_file()
        path = self.rng.choice(files)
        mode = 0o600 if self.entries[path][2] != 0o600 else 0o640
        os.chmod(self._abs(path), mode)
        self.entries[path][2] = mode
        # the ctime moves, the mtime does not: the backup must see it all the same
        return f"chmod {mode:o} {path}"

    def rename_dir(self) -> str:
        dirs = [d for d in self.dirs() if d]
        if not dirs:
            return self.add_dir()
        old = self.rng.choice(dirs)
        parent = self.rng.choice([d for d in self.dirs() if d != old and
                                  not d.startswith(old + "/")])
        new = self._new_name(parent, "r")
        os.rename(self._abs(old), self._abs(new))
        moved = {}
        for path in list(self.entries):
            if path == old or path.startswith(old + "/"):
                moved[new + path[len(old):]] = self.entries.pop(path)
        self.entries.update(moved)
        self._touch_parent(old)
        self._touch_parent(new)
        return f"mv {old} {new}"

    def bring_back(self) -> str:
        """Deleted bytes come back (a file restored by hand, a revert): the
        same content as something an older snapshot stored."""
        if not self.graveyard:
            return self.add_file()
        data = self.rng.choice(self.graveyard)
        folder = self.rng.choice(self.dirs())
        path = self._new_name(folder, "back")
        self._write(path, data, 0o644)
        return f"bring back {len(data)} B as {path}"

    def sync_times(self) -> None:
        """Every entry's mtime on disk as the model has it. Only where it
        differs: utime moves the ctime, and an untouched file must look
        untouched to the next backup."""
        for path, entry in self.entries.items():
            mtime = entry[-1]
            full = self._abs(path)
            if os.lstat(full).st_mtime_ns != mtime:
                os.utime(full, ns=(mtime, mtime), follow_symlinks=False)


def _summary(entry) -> tuple:
    kind = entry[0]
    if kind == "dir":
        return ("dir", None, entry[1])
    if kind == "file":
        return ("file", blake3.blake3(entry[1]).hexdigest(), entry[2])
    return ("link", entry[1], None)


def read_tree(root: str) -> dict:
    """A directory on disk in the model's terms: rel path -> (kind, digest, mode)."""
    out = {}
    st = os.lstat(root)
    out[""] = ("dir", None, stat.S_IMODE(st.st_mode))
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full), None)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None, stat.S_IMODE(st.st_mode))
            else:
                with open(full, "rb") as f:
                    out[rel] = ("file", blake3.blake3(f.read()).hexdigest(),
                                stat.S_IMODE(st.st_mode))
    return out


def tree_diff(expected: dict, found: dict, most: int = 6) -> list:
    """What differs, as short lines (empty: identical)."""
    lines = []
    for path in sorted(set(expected) | set(found)):
        want, got = expected.get(path), found.get(path)
        if want != got:
            lines.append(f"{path or '.'}: expected {_short(want)}, found {_short(got)}")
    return lines[:most] + ([f"... {len(lines) - most} more"] if len(lines) > most else [])


def _short(item) -> str:
    if item is None:
        return "nothing"
    kind, digest, mode = item
    return f"{kind} {digest[:10] if digest else ''} {oct(mode) if mode is not None else ''}".strip()
