"""An interrupted restore, resumed (issue 28): the scenario shared by the
integration test (a small tree) and tools/bench/bench_restore.py (the
4,000-file, 250 MB tree).

    make_tree(root, files, total_bytes, large_files, seed)
    killed = kill_midway(home, dest, total_bytes)      # `flud restore`, SIGKILLed
    summary = resume(home, dest)                       # --overwrite if-changed --json
    limit = resume_limit(total_bytes, killed["large_in_flight"], segment)

The restore is killed (SIGKILL, its whole process group) once the bytes
landed under DEST (files under their own names, and what the temp files
hold: st_blocks, as a large file's temp is written at its blocks' offsets)
reach `fraction` of the tree. The resumed run's fetched_bytes (what its
RETRIEVEs brought, share bytes as sent: its --json summary) is the figure;
the target is fraction + 5% of the tree, plus one segment per large file
that was in flight at the kill.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PART, BESIDE = ".flud-part", ".flud-restored"


def flud_argv(*args) -> list:
    return [sys.executable, "-m", "flud", *map(str, args)]


def make_tree(root, files: int, total_bytes: int, large_files: int, seed: int = 1,
              large_share: float = 0.6) -> int:
    """`files` files under `root` in a few dozen folders: `large_files` of
    them large (together large_share of the bytes), the rest small ones
    of varied sizes. Returns the bytes written (about total_bytes)."""
    rng = random.Random(seed)
    large_each = int(total_bytes * large_share) // max(1, large_files)
    small_files = files - large_files
    small_total = total_bytes - large_each * large_files
    weights = [rng.paretovariate(1.5) for _ in range(small_files)]
    scale = small_total / sum(weights)
    sizes = [max(1, min(900_000, int(w * scale))) for w in weights]
    written = 0
    for i in range(files):
        folder = os.path.join(root, f"d{i % 37:02d}", f"s{i % 5}")
        os.makedirs(folder, exist_ok=True)
        size = large_each if i < large_files else sizes[i - large_files]
        with open(os.path.join(folder, f"f{i:05d}.bin"), "wb") as f:
            f.write(rng.randbytes(size))
        written += size
    return written


def landed_bytes(dest) -> tuple:
    """(bytes landed under dest, large temps there): a file under its own
    name counts its size, a temp what its blocks hold."""
    landed, temps = 0, 0
    for folder, _, names in os.walk(dest):
        for name in names:
            try:
                info = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if name.endswith(PART):
                landed += min(info.st_size, info.st_blocks * 512)
                temps += 1
            else:
                landed += info.st_size
    return landed, temps


def kill_midway(home, dest, total_bytes: int, fraction: float = 0.5,
                timeout: float = 600.0, poll: float = 0.02, extra=()) -> dict:
    """Start `flud restore --to dest` and SIGKILL it once `fraction` of the
    tree's bytes landed. Returns {"landed", "fraction", "temps", "seconds"}."""
    proc = subprocess.Popen(flud_argv("restore", "--home", home, "--to", dest, *extra),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    start = time.monotonic()
    try:
        while True:
            landed, temps = landed_bytes(dest) if os.path.isdir(dest) else (0, 0)
            if landed >= fraction * total_bytes:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if proc.poll() is not None:
                raise AssertionError(f"the restore ended (exit {proc.returncode}) before "
                                     f"{fraction:.0%} of the bytes landed: "
                                     f"{proc.stderr.read()[-2000:]}")
            if time.monotonic() - start > timeout:
                raise AssertionError("the restore did not get halfway in time")
            time.sleep(poll)
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(30)
        proc.stderr.close()
    landed, temps = landed_bytes(dest)   # as the kill left it
    return {"landed": landed, "fraction": landed / total_bytes, "temps": temps,
            "large_in_flight": large_temps(dest), "seconds": time.monotonic() - start}


def large_temps(dest, least: int = 1 << 20) -> int:
    """Temps of large files (the temps holding more than a small file can)."""
    count = 0
    for folder, _, names in os.walk(dest):
        for name in names:
            if name.endswith(PART):
                info = os.lstat(os.path.join(folder, name))
                count += info.st_size >= least
    return count


def resume(home, dest, timeout: float = 600.0, extra=()) -> tuple:
    """(exit code, JSON summary, stderr) of `flud restore --overwrite
    if-changed --json` into the same dest."""
    proc = subprocess.run(flud_argv("restore", "--home", home, "--to", dest,
                                    "--overwrite", "if-changed", "--json", *extra),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), proc.stderr


def resume_limit(total_bytes: int, fraction: float, large_in_flight: int,
                 segment: int = 2 * 1024 * 1024) -> float:
    """The target: what was not landed plus 5% of the tree, plus a segment per
    large file in flight (the issue's: 55% when killed at half)."""
    return (1 - fraction + 0.05) * total_bytes + large_in_flight * segment


def leftovers(dest) -> list:
    return sorted(os.path.relpath(os.path.join(folder, name), dest)
                  for folder, _, names in os.walk(dest) for name in names
                  if name.endswith((PART, BESIDE)))
