#!/usr/bin/env python3
"""The main job, end to end: `make demo` (or `python tools/demo.py [DIR]`).

Starts a 50-node testnet on 127.0.0.1, backs up a directory (a built-in
sample home directory unless one is named), restores it, compares, loses the
client's disk and restores again from the exported key alone, verifies the
shares, prints the figures and stops the testnet.

The sample holds four large files (64, 24, 16 and 8 MiB) in four folders, so
the backup uploads several at once and the restore fetches several at once.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flud.testnet.launch import load as load_testnet  # noqa: E402
from tools.sample_tree import make_sample_tree  # noqa: E402
from tools.treecmp import compare_trees  # noqa: E402

PASSPHRASE = "demo passphrase, not a secret"
# The sample's large files beside music/album.flac (--big-mib): they upload
# (and restore) at once, as a real home's videos and raw photos do.
LARGE_FILES = [("videos/holiday.mp4", 24), ("photos/2024/raw/IMG_0042.dng", 16),
               ("docs/scans/contract.pdf", 8)]


def make_demo_tree(root: str, big_mib: int = 64, large=LARGE_FILES, seed: int = 11) -> dict:
    """The demo's sample home: tools/sample_tree.py's mix (its large file of
    big_mib MiB included) and the large files of `large` ([(path, MiB)])."""
    made = make_sample_tree(root, big_mib=big_mib)
    rng = random.Random(seed)
    for rel, mib in large:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(rng.randbytes(1024 * 1024))
            f.write(rng.randbytes(rng.randrange(1, 4096)))  # not a whole number of segments
        made["files"] += 1
        made["bytes"] += os.path.getsize(path)
    return made


def parse_large(text: str) -> list:
    """"24,16,8" -> LARGE_FILES with those sizes ("" or "0": none)."""
    sizes = [int(x) for x in text.split(",") if x.strip() and int(x) > 0]
    names = [rel for rel, _ in LARGE_FILES] + [f"videos/clip-{i}.mp4" for i in range(len(sizes))]
    return list(zip(names, sizes))


def flud(*args, check=True, env=None):
    cmd = [sys.executable, "-m", "flud", *args]
    print("$ flud " + " ".join(args), flush=True)
    started = time.monotonic()
    result = subprocess.run(cmd, env=env)
    elapsed = time.monotonic() - started
    if check and result.returncode != 0:
        raise SystemExit(f"`flud {' '.join(args)}` failed with exit code {result.returncode}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="?", help="directory to back up (default: a sample)")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--work", default=os.path.join(os.getcwd(), "run", "demo"))
    parser.add_argument("--big-mib", type=int, default=64, help="size of the sample's largest file")
    parser.add_argument("--large-mib", default=",".join(str(m) for _, m in LARGE_FILES),
                        help="sizes in MiB of the sample's other large files (default "
                             "%(default)s; 0 for none)")
    args = parser.parse_args()

    work = os.path.abspath(args.work)
    if os.path.exists(work):
        subprocess.run([sys.executable, "-m", "flud", "testnet", "down", "--dir",
                        os.path.join(work, "testnet")], capture_output=True)
        shutil.rmtree(work)
    os.makedirs(work)
    source = args.source or os.path.join(work, "sample")
    if not args.source:
        made = make_demo_tree(source, big_mib=args.big_mib, large=parse_large(args.large_mib))
        print(f"sample home: {made['files']} files, {made['bytes'] / 1e6:.1f} MB in {source}")
    testnet = os.path.join(work, "testnet")
    home, restored = os.path.join(work, "client"), os.path.join(work, "restored")
    env = dict(os.environ, FLUD_PASSPHRASE=PASSPHRASE)
    figures = {}
    try:
        figures["testnet up"] = flud("testnet", "up", "--nodes", str(args.nodes), "--dir", testnet)
        flud("init", "--home", home, "--testnet", testnet)
        figures["backup"] = flud("backup", source, "--home", home, check=False)
        figures["backup again (no change)"] = flud("backup", source, "--home", home, check=False)
        figures["restore"] = flud("restore", "--home", home, "--to", restored)
        problems = compare_trees(source, os.path.join(restored, os.path.basename(source)))
        print("compare: " + ("identical (contents, modes, mtimes, symlinks, empty dirs)"
                             if not problems else f"{len(problems)} differences: {problems[:5]}"))
        flud("verify", "--home", home)
        key = os.path.join(work, "key.flud")
        flud("key", "export", "--home", home, key, env=env)
        shutil.rmtree(home)
        print("-- the client's disk is gone; only the exported key is left --")
        new_home, restored2 = os.path.join(work, "client-new"), os.path.join(work, "restored-2")
        first = load_testnet(testnet)["nodes"][0]
        flud("init", "--home", new_home, "--import-key", key, "--join",
             f"{first['host']}:{first['port']}", env=env)
        figures["total-loss restore"] = flud("restore", "--home", new_home, "--to", restored2)
        problems2 = compare_trees(source, os.path.join(restored2, os.path.basename(source)))
        print("compare after total loss: " + ("identical" if not problems2 else
                                              f"{len(problems2)} differences: {problems2[:5]}"))
        flud("testnet", "status", "--dir", testnet, check=False)
    finally:
        flud("testnet", "down", "--dir", testnet, check=False)
    print("\nfigures (wall time of each command, including process start):")
    for name, seconds in figures.items():
        print(f"  {name:28} {seconds:7.2f} s")
    return 0 if not problems and not problems2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
