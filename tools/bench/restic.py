"""restic, the yardstick of bench_tree.py: find or install it, and time its commands.

- find_restic(): the `restic` command, installed from Debian's package when missing and
  this runs as root or with passwordless sudo (`apt-get install -y restic`); None and a
  reason otherwise (the bench then reports flud's figures alone).
- Restic(repo): a local repository in the run directory with a fixed password
  (RESTIC_PASSWORD), its cache beside it; init, backup, restore. Every command goes
  through common.run: wall time of the whole command, and peak RSS of the restic
  process from wait4 (ru_maxrss; restic runs as one process).
- repo_size(): bytes of the repository's files (apparent sizes, like `du -b`).

restic 0.14 (Debian 12's) creates repository version 2, which compresses with zstd
(`auto`) by default, and deduplicates content-defined chunks.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import CmdResult, log  # noqa: E402

PASSWORD = "flud-bench-restic"
HOST = "flud-bench"
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def find_restic(install: bool = True) -> tuple:
    """(path or None, note)."""
    path = shutil.which("restic")
    if path or not install:
        return path, "" if path else "restic is not installed"
    if os.geteuid() == 0:
        prefix = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True,
                                                 timeout=30).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return None, "restic is not installed (and this is neither root nor passwordless sudo)"
    log("restic: not installed; apt-get install -y restic")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for attempt in (["apt-get", "install", "-y", "restic"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "restic"]):
        r = subprocess.run(prefix + attempt, capture_output=True, text=True, env=env, timeout=900)
        if attempt[1] == "install" and r.returncode == 0:
            break
    path = shutil.which("restic")
    return path, "" if path else f"apt-get install restic failed: {r.stderr.strip()[-300:]}"


def version(binary: str) -> str:
    r = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"restic ([\d.]+)", r.stdout)
    return m.group(1) if m else r.stdout.strip()[:40]


def tree_bytes(path: str) -> int:
    """Apparent size of every file under path (what `du -sb` counts, directories aside)."""
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


class Restic:
    """One local repository: `restic init` when created."""

    def __init__(self, binary: str, repo: str, timeout: float = 4 * 3600):
        self.binary = binary
        self.repo = os.path.abspath(repo)
        self.cache = self.repo + ".cache"
        self.timeout = timeout
        self.env = dict(os.environ, RESTIC_PASSWORD=PASSWORD, RESTIC_REPOSITORY=self.repo,
                        RESTIC_CACHE_DIR=self.cache, RESTIC_PROGRESS_FPS="0.2")

    def run(self, *args, what: str = "") -> CmdResult:
        r = common.run([self.binary, *map(str, args)], timeout=self.timeout, env=self.env)
        return r.check(what or f"restic {args[0]}")

    def init(self) -> CmdResult:
        self.remove()
        os.makedirs(os.path.dirname(self.repo), exist_ok=True)
        return self.run("init")

    def backup(self, *sources: str) -> CmdResult:
        return self.run("backup", "--host", HOST, *sources)

    def restore(self, dest: str) -> CmdResult:
        return self.run("restore", "latest", "--target", dest)

    def size(self) -> int:
        return tree_bytes(self.repo)

    def remove(self) -> None:
        shutil.rmtree(self.repo, ignore_errors=True)
        shutil.rmtree(self.cache, ignore_errors=True)

    @staticmethod
    def restored_path(dest: str, source: str) -> str:
        """restic restores a source under its absolute path inside the target."""
        return os.path.join(dest, os.path.abspath(source).lstrip("/"))


def parse_added(text: str) -> dict:
    """restic's 'Added to the repository: 1.234 MiB (567.8 KiB stored)'."""
    m = re.search(r"Added to the repo(?:sitory)?: ([\d.]+) (\w+)(?: \(([\d.]+) (\w+) stored\))?",
                  text)
    if not m:
        return {}
    out = {"added": float(m.group(1)) * _UNITS.get(m.group(2), 1)}
    if m.group(3):
        out["stored"] = float(m.group(3)) * _UNITS.get(m.group(4), 1)
    return out
