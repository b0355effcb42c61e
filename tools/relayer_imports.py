"""Rewrite imports for the re-layering of issue 26 (commit "re-layer moves").

    python tools/relayer_imports.py FILE...

For code written before the moves and merged after them: rewrites, in the
given files, every import and dotted name of a moved client module
(flud.client.repository.head -> flud.client.repository.head, `from flud.client import
head` -> `from flud.client.repository import head`...), `storage.X` and
`aggregator.X` imports to flud.storage.X and flud.aggregator.X, and
client/OLD.py paths in comments. Idempotent; prints the files it changed.
/work/relayer-moves.md (and the table below) is the rename map.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CLIENT = {
    "blobs": "repository/blobs",
    "chain": "repository/head_chain",
    "head": "repository/head",
    "holders": "repository/holder_map",
    "repo": "repository/reader",
    "snapshots": "repository/snapshot_lookup",
    "tree": "repository/tree_records",
    "treewalk": "repository/tree_walk",
    "manifest": "repository/version1",
    "contents": "repository/small_contents",
    "segments": "repository/segments",
    "extents": "repository/extents",
    "prune_state": "repository/prune_books",
    "retention": "prune/retention",
    "verify": "verify/verify_job",
    "scan": "backup/source_scan",
    "walk": "backup/source_walk",
    "health": "node_health",
    "leases": "lease_renewal",
    "backup/run": "backup/backup_job",
    "backup/small": "backup/small_files",
    "backup/large": "backup/large_files",
    "backup/snapshot": "backup/tree_writer",
    "backup/tree": "backup/tree_builder",
    "backup/contents": "backup/content_log",
    "backup/files": "backup/file_reading",
    "restore/run": "restore/restore_job",
    "restore/tree": "restore/tree_restore",
    "restore/small": "restore/small_fetch",
    "restore/runs": "restore/small_runs",
    "restore/blocks": "restore/block_restore",
    "restore/buffers": "restore/block_buffers",
    "restore/writer": "restore/block_writer",
    "restore/files": "restore/file_writer",
    "restore/paths": "restore/wanted_paths",
    "prune/run": "prune/prune_job",
    "repair/run": "repair/repository_check",
    "repair/job": "repair/check_job",
    "repair/health": "repair/object_health",
    "repair/plan": "repair/repair_plan",
    "repair/state": "repair/check_state",
    "repair/streams": "repair/stream_repair",
    # step 2 and 3 (after the moves landed)
    "backup/challenges": "repository/share_challenges",
    "fileread": "restore/file_ranges",
    "mountview": "restore/mount_view",
    "stats": "repository/tree_stats",
}
# Modules split by name after the moves: `from OLD import a, b` goes to each
# name's new module (after the path table above has run).
SPLIT = {
    "flud.client.repository.version1": {
        **dict.fromkeys(("ManifestMissing", "RootNotStored", "RootUnconfirmed", "find_root",
                         "put_root", "put_root_v2", "root_place_key", "root_holders",
                         "root_quorum", "ROOT_COPIES_EXTRA", "COMPRESS_LEVEL"),
                        "flud.client.repository.root_store"),
        "root_names": "flud.client.repository.snapshot_paths",
        "snapshot_paths": "flud.client.repository.snapshot_paths",
        "fetch_manifest": "flud.client.repository.version1_reader",
        "MANIFEST_VERSION": "flud.client.repository.version1_reader",
        "build_manifest": "tests.unit.client.v1_writer",
        "ManifestIncomplete": "tests.unit.client.v1_writer",
    },
    "flud.client.verify.verify_job": {
        "IndexChallenges": "flud.client.repository.share_challenges",
        "record_bundles": "flud.client.verify.tree_shares",
    },
}
MOVES = {}   # dotted old -> dotted new
PATHS = {}   # old path -> new path
for old, new in CLIENT.items():
    MOVES["flud.client." + old.replace("/", ".")] = "flud.client." + new.replace("/", ".")
    PATHS[f"flud/client/{old}.py"] = f"flud/client/{new}.py"
# outside the client (after the moves landed)
MOVES["flud.protocol.server"] = "flud.node.request_handler"
MOVES["tests.unit.protocol.test_server"] = "tests.unit.node.test_request_handler"

NEW_NAMES = sorted(MOVES.values(), key=len, reverse=True)
keys = sorted(MOVES, key=len, reverse=True)
dotted = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])")
def sub_dotted(text):
    def repl(m):
        # flud/client/verify was a module and is a package now: a name
        # already rewritten is left alone
        for name in NEW_NAMES:
            if text.startswith(name, m.start()) and not re.match(r"\w", text[m.start() + len(name):][:1]):
                return m.group(0)
        if re.match(r"\s+import\s+\(?\s*verify_job\b", text[m.end():]):
            return m.group(0)
        # a package that was a module before (flud/client/verify), quoted whole
        if (ROOT / m.group(1).replace(".", "/") / "__init__.py").exists() and m.start() \
                and text[m.start() - 1] in "\"'" and text[m.end():m.end() + 1] == text[m.start() - 1]:
            return m.group(0)
        # a module of a package that was a module before (flud/client/verify)
        follow = re.match(r"\.([a-z_0-9]+)", text[m.end():])
        if follow and (ROOT / m.group(1).replace(".", "/") / f"{follow.group(1)}.py").exists():
            return m.group(0)
        return MOVES[m.group(1)]
    return dotted.sub(repl, text)

# from PKG import mod [as alias]  (mod moved)
from_import = re.compile(r"^(\s*)from (flud\.client(?:\.[a-z_]+)?) import ([a-z_]+)( as [A-Za-z_]+)?\s*$", re.M)
def sub_from(text):
    def repl(m):
        indent, pkg, mod, alias = m.groups()
        full = f"{pkg}.{mod}"
        if full not in MOVES:
            return m.group(0)
        newpkg, _, newmod = MOVES[full].rpartition(".")
        alias = alias or (f" as {mod}" if newmod != mod else "")
        return f"{indent}from {newpkg} import {newmod}{alias}"
    return from_import.sub(repl, text)

pathkeys = sorted((k for k in PATHS if k.startswith("flud/client/")), key=len, reverse=True)
pathre = re.compile(r"(?<![\w/])(flud/)?client/(" + "|".join(re.escape(k[len("flud/client/"):]) for k in pathkeys) + r")")
def sub_paths(text):
    return pathre.sub(lambda m: (m.group(1) or "") + PATHS["flud/client/" + m.group(2)][len("flud/"):], text)

stor = re.compile(r"^(\s*)(from|import) (storage|aggregator)\b", re.M)


split_from = re.compile(r"^(\s*)from (" + "|".join(re.escape(m) for m in SPLIT)
                        + r") import (\([^)]*\)|[^\n]*)", re.M)


def sub_split(text):
    def repl(m):
        indent, module, names = m.groups()
        names = [n.strip() for n in names.strip("()").replace("\n", " ").split(",") if n.strip()]
        groups = {}
        for name in names:
            home = SPLIT[module].get(name.split(" as ")[0], module)
            groups.setdefault(home, []).append(name)
        if list(groups) == [module]:
            return m.group(0)   # nothing of it moved
        return "\n".join(f"{indent}from {home} import {', '.join(group)}"
                         for home, group in groups.items())
    return split_from.sub(repl, text)


def rewrite(text: str) -> str:
    new = sub_dotted(text)
    new = sub_from(new)
    new = sub_split(new)
    new = stor.sub(lambda m: f"{m.group(1)}{m.group(2)} flud.{m.group(3)}", new)
    new = sub_paths(new)
    return new


def main(paths) -> int:
    for name in paths:
        path = Path(name)
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            path.write_text(new)
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
