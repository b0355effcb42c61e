"""A fixture home directory for the exclude rules (issue 28, item 1), built
by the tests and by tools/bench/bench_excludes.py.

It holds what a real home holds and a backup should leave out: a cache
with a valid CACHEDIR.TAG and many entries (made as hard links: a name
costs a directory entry, not an inode, so 100,000 of them are made in
seconds), a cache-looking directory whose tag is not valid (kept), nested
.fludignore files with negations, a directory marked .nobackup, and a
sparse file over the size cut-off. `make_home` returns the relative paths a
backup with EXCLUDE_FLAGS keeps.
"""
import os

CACHEDIR_TAG = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
                b"# This file is a cache directory tag created by a browser.\n")
SIZE_CUTOFF = "8M"
BIG_FILE_SIZE = 64 * 1024 * 1024     # sparse: costs no disk
MARKER = ".nobackup"
# The flags of `flud backup` the expectations below are for
EXCLUDE_FLAGS = ("--exclude-caches", "--exclude-if-present", MARKER,
                 "--exclude-larger-than", SIZE_CUTOFF)
LINKS_PER_INODE = 50_000             # ext4 allows 65,000 links to one inode

ROOT_IGNORE = b"# the home's own rules\n*.log\nnode_modules/\n/scratch/\n"
PROJECT_IGNORE = b"!important.log\n*.o\ntmp/\n"
DEEP_IGNORE = b"important.log\n"

FILES = {   # relative path -> (content, kept by a backup with EXCLUDE_FLAGS)
    "docs/report.txt": (b"quarterly report\n" * 40, True),
    "docs/notes.md": (b"# notes\n", True),
    "app.log": (b"log line\n", False),
    "node_modules/lib/index.js": (b"module.exports = 1\n", False),
    "scratch/tmp.bin": (b"\0" * 100, False),
    "project/scratch/keep.txt": (b"anchored rules do not reach here\n", True),
    "project/main.c": (b"int main(void) { return 0; }\n", True),
    "project/main.o": (b"\x7fELF", False),
    "project/important.log": (b"kept by a negation\n", True),
    "project/debug.log": (b"dropped\n", False),
    "project/tmp/build.tmp": (b"x", False),
    "project/sub/code.c": (b"/* deeper */\n", True),
    "project/sub/important.log": (b"excluded again deeper\n", False),
    "vm/disk.img": (b"\1" * 4096, False),
    "browser/fake-cache/CACHEDIR.TAG": (b"Signature: this is not the real one\n", True),
    "browser/fake-cache/page.html": (b"<html></html>\n", True),
}
KEPT_DIRS = ("docs", "project", "project/scratch", "project/sub", "vm", "browser",
             "browser/fake-cache", ".cache", "videos")
KEPT_MARKERS = ("vm/.nobackup", ".cache/CACHEDIR.TAG", ".fludignore", "project/.fludignore",
                "project/sub/.fludignore")


def _write(root, relative, data, mode=0o644):
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def make_cache(directory, entries: int) -> None:
    """A cache directory: a valid CACHEDIR.TAG and `entries` other names."""
    os.makedirs(directory, exist_ok=True)
    _write(directory, "CACHEDIR.TAG", CACHEDIR_TAG)
    made = 0
    source = None
    while made < entries:
        if made % LINKS_PER_INODE == 0:
            source = _write(directory, f"entry{made:07d}", b"cached thumbnail bytes")
        else:
            os.link(source, os.path.join(directory, f"entry{made:07d}"))
        made += 1


def make_home(root, cache_entries: int = 100_000) -> set:
    """Build the home at root; the relative paths (files, directories,
    symlinks) a backup with EXCLUDE_FLAGS keeps."""
    os.makedirs(root, exist_ok=True)
    for relative, (data, _) in FILES.items():
        _write(root, relative, data)
    _write(root, ".fludignore", ROOT_IGNORE)
    _write(root, "project/.fludignore", PROJECT_IGNORE)
    _write(root, "project/sub/.fludignore", DEEP_IGNORE)
    _write(root, os.path.join("vm", MARKER), b"")
    make_cache(os.path.join(root, ".cache"), cache_entries)
    big = os.path.join(root, "videos", "holiday.mkv")
    os.makedirs(os.path.dirname(big), exist_ok=True)
    with open(big, "wb") as f:
        f.truncate(BIG_FILE_SIZE)
    return ({rel for rel, (_, kept) in FILES.items() if kept} | set(KEPT_DIRS)
            | set(KEPT_MARKERS))


def kept_files(kept: set) -> set:
    """The regular files among what make_home says is kept."""
    return {rel for rel in kept if rel not in KEPT_DIRS}
