"""Where the bytes on the nodes go (issue 27): a generated tree, backed up once.

    .venv/bin/python tools/bench/bench_stored.py [--stored-files 5000] [--nodes 12]

The tree is tools/bench/gen_tree.py's (bench_tree's, smaller by default). After
one backup into a fresh home, the client index says what each layer adds, and
the nodes' STATS what they hold:

    plaintext            the files' bytes
    file data            what the files store: compressed where that saved (each
                         content once: dedup), before n/k
    records              the rest of the bundles: tree, large-content, snapshot
                         and map records (sealed blobs), before n/k
    n/k                  data and records times n/k, exactly
    coding padding       shares past that: a bundle or segment not a multiple of k
    node overhead        the nodes' bytes_stored past the shares (tar framing of
                         bundle shares in their archives, and what STATS counts)

against n/k x restic's repository for the same tree (restic 0.14, compression
auto) where restic is installed.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import restic as restic_tool  # noqa: E402
from bench_tree import _tree  # noqa: E402
from common import MB, Row, Testnet, log  # noqa: E402

NAME = "bench_stored"


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_stored")
    g.add_argument("--stored-files", type=int, default=None,
                   help="files in the generated tree (default 5000; 1000 quick)")
    g.add_argument("--stored-no-restic", action="store_true", help="flud's figures alone")


def breakdown(home: str) -> dict:
    """What the client index says one backup stored, by layer (bytes)."""
    db = sqlite3.connect(os.path.join(home, "index.sqlite"))
    cfg = common.home_config(home)
    k, n = cfg["k"], cfg["n"]
    small = large = 0
    for (record,) in db.execute("SELECT record FROM contents"):
        c = json.loads(record)
        if c["t"] == "S":
            small += c["l"]
    extents = {}
    for key, record in db.execute("SELECT seg_key, record FROM segments "
                                  "WHERE seg_key LIKE 'E%'"):
        extents[key] = json.loads(record)
    shares = 0
    for x in extents.values():
        stored = sum(s[5] if len(s) == 6 else s[1] for s in x["segs"])
        large += stored
        shares += n * sum(s[2] for s in x["segs"])
    bundles = 0
    for (record,) in db.execute("SELECT record FROM bundles"):
        b = json.loads(record)
        bundles += b["len"]
        shares += b["n"] * b["bl"]
    db.close()
    return {"k": k, "n": n, "file_data": small + large, "records": bundles - small,
            "coded": shares}


def run(args) -> list:
    files = args.stored_files or (1000 if args.quick else 5000)
    tree, summary = _tree(files, None, 27)
    plain = restic_tool.tree_bytes(tree)
    base = os.path.join(common.RUN_DIR, "stored")
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    rows = []
    try:
        tn.up()
        home = common.new_home(os.path.join(base, "cl"), tn.dir)
        before = tn.bytes_stored()
        log(f"bench_stored: flud backup of {files} files, {plain / MB:.0f} MB")
        common.flud("backup", tree, "--home", home, timeout=3600).check("flud backup")
        on_nodes = tn.bytes_stored() - before
        b = breakdown(home)
    finally:
        tn.down()
        tn.remove()
    k, n = b["k"], b["n"]
    expand = n / k
    data, records = b["file_data"], b["records"]
    padding = b["coded"] - expand * (data + records)
    node = on_nodes - b["coded"]
    restic_size, note = _restic(args, tree, base)
    target = expand * restic_size if restic_size else None

    def mb(v):
        return v / MB

    rows += [
        Row("plaintext of the tree", [mb(plain)], "MB", None, None, "-",
            f"{files} generated files (tools/bench/gen_tree.py, seed 27)"),
        Row("file data stored (compressed, each content once), before n/k", [mb(data)], "MB",
            None, None, f"restic repository: {mb(restic_size):.1f} MB" if restic_size else note,
            f"{data / plain:.3f} of the plaintext"),
        Row("records (tree, large, snapshot, map), before n/k", [mb(records)], "MB", None, None,
            "-", f"{records / max(1, data):.2%} of the file data"),
        Row("coding padding (past n/k x bundles and segments)", [mb(padding)], "MB", None, None,
            "-", f"{padding / max(1, b['coded']):.2%} of the shares"),
        Row("node overhead (bytes_stored past the shares)", [mb(node)], "MB", None, None, "-",
            f"{node / max(1, on_nodes):.2%} of what the nodes hold"),
        Row("bytes on the nodes", [mb(on_nodes)], "MB", mb(target) if target else None, "<=",
            f"n/k x restic = {mb(target):.1f} MB" if target else note,
            f"n/k = {n}/{k}; on the nodes / (n/k x file data) = "
            f"{on_nodes / (expand * data):.3f}"),
    ]
    return rows


def _restic(args, tree, base) -> tuple:
    if args.stored_no_restic:
        return None, "restic not run"
    binary, note = restic_tool.find_restic()
    if not binary:
        return None, note
    repo = restic_tool.Restic(binary, os.path.join(base, "restic-repo"))
    try:
        repo.init()
        repo.backup(tree)
        return repo.size(), ""
    finally:
        repo.remove()
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
