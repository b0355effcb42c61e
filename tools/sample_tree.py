"""A sample home directory: a size mix of small files, one large file,
a symlink, an empty directory, nested folders. Deterministic for a seed."""
import math
import os
import random

# (count, low, high) bytes: shaped like a home directory, mostly small files.
SMALL_MIX = [(4, 1, 10), (8, 10, 100), (25, 100, 1000), (80, 1000, 10000),
             (40, 10000, 100000), (6, 100000, 1000000)]


def make_sample_tree(root: str, big_mib: int = 64, seed: int = 7, scale: int = 1) -> dict:
    rng = random.Random(seed)
    folders = ["docs", "docs/letters", "src/project", "photos/2024", "music", "."]
    count = total = 0
    for bucket, (n, low, high) in enumerate(SMALL_MIX):
        for i in range(n * scale):
            size = int(math.exp(rng.uniform(math.log(low), math.log(high))))
            folder = os.path.join(root, folders[(bucket + i) % len(folders)])
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"file-{bucket}-{i}.dat"), "wb") as f:
                f.write(rng.randbytes(size))
            count += 1
            total += size
    if big_mib:
        with open(os.path.join(root, "music", "album.flac"), "wb") as f:
            for _ in range(big_mib):
                f.write(rng.randbytes(1024 * 1024))
        count += 1
        total += big_mib * 1024 * 1024
    os.makedirs(os.path.join(root, "empty-folder"), exist_ok=True)
    os.symlink("docs/letters", os.path.join(root, "letters-link"))
    os.chmod(os.path.join(root, "docs"), 0o750)
    return {"files": count, "bytes": total}
