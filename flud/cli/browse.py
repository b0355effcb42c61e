"""Looking into snapshots: `flud ls` (snapshots, or the files of one),
`flud find PATTERN` and `flud diff S1 S2`. Each walks the trees directory by
directory (client/repository/tree_walk.py), so memory follows one directory."""
import fnmatch
import time

from twisted.internet import defer

from flud.cli.exits import EXIT_NO_MATCH, EXIT_OK, EXIT_SKIPPED, UserError
from flud.cli.job_config import BrowseConfig
from flud.cli.snapshot_lines import entry_line, list_local, snapshot_line  # noqa: F401
from flud.client.repository.root_store import ManifestMissing
from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.progress import human_bytes
from flud.client.records import DIRECTORY, KIND_NAMES, SYMLINK
from flud.client.restore.tree_restore import wanted_by
from flud.client.repository.snapshot_lookup import numbered, open_repository
from flud.client.repository.tree_walk import Damaged, TreeReader
from flud.errors import FludError

# `ls --json` holds its entries until it prints them as one object: at most this many.
JSON_ENTRIES = 200_000


@defer.inlineCallbacks
def _repository(ctx):
    try:
        root, repo = yield open_repository(ctx, reading=True, cached=True)
    except ManifestMissing as err:
        raise UserError(str(err))
    if repo is None:
        raise UserError("this repository has only version-1 snapshots: back up once with "
                        "this flud to browse it (restore reads them as they are)")
    return repo


def _damaged_reporter(problems):
    def damaged(d):
        problems.append((d.path, d.why))
        print(f"  damaged: {d.path}: {d.why}")
    return damaged


@defer.inlineCallbacks
def _records(repo, problems):
    found = yield repo.snapshots(lambda blob_id, why: problems.append((blob_id, why)))
    return found


@defer.inlineCallbacks
def _one_snapshot(repo, snapshot_id):
    """The record of one snapshot (the newest for None), as restore finds it
    (client/repository/snapshot_lookup.py): the newest from the root, a
    numbered one by a binary search of the map's list, not every record
    opened."""
    try:
        if snapshot_id is None:
            record = yield repo.snapshot(repo.root.snapshot.blob_id)
            return record
        found = yield numbered(repo, snapshot_id)
    except FludError as err:
        raise UserError(f"the snapshot cannot be read: {err}")
    if found is None:
        raise UserError(f"no snapshot {snapshot_id}")
    return found[1]


def _pick(records, snapshot_id):
    if not records:
        raise UserError("no snapshot could be read")
    if snapshot_id is None:
        return records[-1]
    for blob_id, record in records:
        if record.snapshot_id == snapshot_id:
            return blob_id, record
    raise UserError(f"no snapshot {snapshot_id}")


@defer.inlineCallbacks
def ls(ctx, args):
    config = BrowseConfig.from_args(args)
    repo = yield _repository(ctx)
    problems = []
    try:
        summary = vars(args).setdefault("summary", {})
        listing = config.snapshot is None and not config.path and config.dir is None
        if listing:
            records = yield _records(repo, problems)
            summary["snapshots"] = [
                {"id": r.snapshot_id, "created": r.time, "host": r.host, "paths": list(r.paths),
                 "tags": list(r.tags), "files": r.stats.get("files", 0),
                 "bytes": r.stats.get("bytes", 0)} for _, r in records]
            for old in repo.index.v1:   # made before version 2: restore reads them as they are
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(old["created"]))
                print(f"snapshot {old['id']:>4}  {when}  (version 1: a manifest)")
            for _, r in records:
                print(snapshot_line(r.snapshot_id, r.time, r.host, r.paths, r.tags,
                                    r.stats.get("files", 0), r.stats.get("bytes", 0)))
            return EXIT_SKIPPED if problems else EXIT_OK
        record = yield _one_snapshot(repo, config.snapshot)
        if config.dir is not None:
            return (yield _one_directory(repo, record, config.dir, summary))
        paths = snapshot_paths(record.paths, [config.path]) if config.path else []
        reader = TreeReader(repo.fetch_sealed, repo.sealer)
        summary["snapshot"] = record.snapshot_id
        entries = summary["entries"] = [] if config.as_json else None

        def visit(path, entry):
            target = entry.ref if entry.kind == SYMLINK else ""
            print(entry_line(path, entry.kind, entry.mode, entry.mtime_ns, entry.size, target))
            if entries is not None and len(entries) < JSON_ENTRIES:
                entries.append({"path": path, "kind": KIND_NAMES[entry.kind],
                                "mode": entry.mode, "mtime_ns": entry.mtime_ns,
                                "size": entry.size, **({"target": target} if target else {})})
            elif entries is not None:
                summary["truncated"] = True
        yield reader.walk(record.tree, visit, _damaged_reporter(problems),
                          wanted=wanted_by(paths))
    finally:
        repo.close()
    return EXIT_SKIPPED if problems else EXIT_OK


@defer.inlineCallbacks
def _one_directory(repo, record, directory: str, summary: dict):
    """`ls --dir PATH`: the entries of one directory, its record (and its
    continuations) and those of the directories above it fetched, nothing
    below."""
    from flud.client.repository.tree_walk import NotADirectory

    reader = TreeReader(repo.fetch_sealed, repo.sealer)
    path = directory.strip("/")
    summary.update(snapshot=record.snapshot_id, path=path)
    try:
        blob_id = yield reader.directory(record.tree, path)
        entries = yield reader.entries(blob_id)
    except NotADirectory as err:
        raise UserError(str(err))
    except FludError as err:
        raise UserError(f"directory {path or '/'} cannot be read: {err}")
    listed = summary["entries"] = []
    for entry in entries:
        target = entry.ref if entry.kind == SYMLINK else ""
        full = f"{path}/{entry.name}" if path else entry.name
        print(entry_line(full, entry.kind, entry.mode, entry.mtime_ns, entry.size, target))
        if len(listed) < JSON_ENTRIES:
            listed.append({"name": entry.name, "path": full,
                           "kind": KIND_NAMES[entry.kind], "mode": entry.mode,
                           "mtime_ns": entry.mtime_ns, "size": entry.size,
                           **({"target": target} if target else {})})
    return EXIT_OK


@defer.inlineCallbacks
def find(ctx, args):
    """Paths matching a pattern (on the name, or on the whole path when the
    pattern holds a '/') in every snapshot, or one."""
    repo = yield _repository(ctx)
    config = BrowseConfig.from_args(args)
    problems, hits = [], [0]
    pattern = config.pattern
    try:
        records = yield _records(repo, problems)
        if config.snapshot is not None:
            records = [_pick(records, config.snapshot)]
        for _, record in records:
            reader = TreeReader(repo.fetch_sealed, repo.sealer)

            def visit(path, entry, record=record):
                name = path.rsplit("/", 1)[-1]
                subject = path if "/" in pattern else name
                if fnmatch.fnmatchcase(subject, pattern):
                    hits[0] += 1
                    target = entry.ref if entry.kind == SYMLINK else ""
                    print(f"snapshot {record.snapshot_id:>4}  "
                          + entry_line(path, entry.kind, entry.mode, entry.mtime_ns,
                                       entry.size, target))
            yield reader.walk(record.tree, visit, _damaged_reporter(problems))
    finally:
        repo.close()
    print(f"{hits[0]} match(es) in {len(records)} snapshot(s)")
    if problems:
        return EXIT_SKIPPED
    return EXIT_OK if hits[0] else EXIT_NO_MATCH


@defer.inlineCallbacks
def diff(ctx, args):
    """Added (+), removed (-) and changed (M) paths from one snapshot to
    another; a directory whose mode or time changed (an entry added or
    removed in it moves its mtime) is changed too, with a trailing '/'."""
    repo = yield _repository(ctx)
    problems, counts = [], {"+": 0, "-": 0, "M": 0}
    try:
        records = yield _records(repo, problems)
        config = BrowseConfig.from_args(args)
        _, old = _pick(records, config.old)
        _, new = _pick(records, config.new)
        reader = TreeReader(repo.fetch_sealed, repo.sealer)

        def report(change, path, a, b):
            counts[change] += 1
            suffix = "/" if (b or a).kind == DIRECTORY else ""
            print(f"{change} {path}{suffix}")
        yield reader.diff(old.tree, new.tree, report, _damaged_reporter(problems))
    finally:
        repo.close()
    print(f"{counts['+']} added, {counts['-']} removed, {counts['M']} changed")
    return EXIT_SKIPPED if problems else EXIT_OK


@defer.inlineCallbacks
def stats(ctx, args):
    """`flud stats`: restore size, unique and stored bytes, compression and
    dedup, bytes on each node (client/repository/tree_stats.py: the trees streamed)."""
    from flud.client.repository.tree_stats import RepositoryStats

    config = BrowseConfig.from_args(args)
    repo = yield _repository(ctx)
    problems = []
    try:
        records = yield _records(repo, problems)
        if config.snapshot is not None:
            records = [_pick(records, config.snapshot)]
        counted = RepositoryStats(repo, TreeReader(repo.fetch_sealed, repo.sealer),
                                  lambda path, why: _damaged_reporter(problems)(
                                      Damaged(path, why)))
        for _, record in records:
            yield counted.add_snapshot(record)
        figures = counted.summary(with_nodes=config.snapshot is None)
    finally:
        repo.close()
    summary = vars(args).setdefault("summary", {})
    summary.update(figures, snapshots=[r.snapshot_id for _, r in records],
                   damaged=[{"path": p, "why": w} for p, w in problems[:100]])
    f = figures
    print(f"{f['snapshots_count']} snapshot(s)")
    print(f"  restore size: {human_bytes(f['total_size'])} in {f['total_file_count']} files "
          f"({f['total_dir_count']} dirs, {f['total_symlink_count']} symlinks)")
    print(f"  unique:       {human_bytes(f['unique_size'])} in {f['unique_file_count']} "
          f"distinct contents (dedup ratio {_ratio(f['dedup_ratio'])})")
    print(f"  stored:       {human_bytes(f['stored_size'])} compressed and encrypted "
          f"(compression ratio {_ratio(f['compression_ratio'])}, "
          f"{f['compression_space_saving'] or 0:.1f}% saved)")
    if "nodes" in f:
        print(f"  on the nodes: {human_bytes(f['total_node_bytes'])} in shares "
              f"({_ratio(f['expansion_ratio'])} of what is stored: erasure coding and the "
              f"snapshots' records)")
        for n in f["nodes"]:
            print(f"    {n['node'][:12]}  {n['shares']:>7} shares  {human_bytes(n['bytes']):>10}")
    return EXIT_SKIPPED if problems else EXIT_OK


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"
