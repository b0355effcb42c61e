"""The client's composition root: one job (backup, restore, verify) under a
reactor. It sets up the memory monitor, the CPU pool, the network and the
progress, runs the job and prints its summary."""
import contextlib
import json
import logging
import os
import sys

from twisted.internet import defer

from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED, UserError
from flud.cli.home import open_home
from flud.cli.job_config import (AdoptConfig, BackupConfig, DumpConfig, RestoreConfig,
                                 RunConfig, VerifyConfig)
from flud.cli.results import BackupResult, RestoreResult, VerifyResult
from flud.cli.runner import run_reactor
from flud.agent.lock import HomeBusy, HomeLock
from flud.client.progress import human_bytes

log = logging.getLogger("flud.client")


# Jobs that change nothing on the nodes or in the index run beside any other.
READ_ONLY_JOBS = {"ls", "find", "diff", "dump", "stats"}
# Jobs whose stdout is their data (a file's bytes, a tar stream): with
# --json their JSON lines go to stderr, the summary its last line.
JSON_ON_STDERR = {"dump"}


def run_client(args, job: str) -> int:
    """Run the job under the home's job lock (READ_ONLY_JOBS aside). With
    --json, what it prints goes to stderr and its summary (args.summary,
    filled by the job) is one JSON object on stdout."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config = RunConfig.from_args(args)   # read once: the job runs on it, not on args
    as_json = config.as_json
    args.summary = dict(getattr(args, "summary", None) or {})   # what a caller began
    # the JSON lines' (the job's own prints go to stderr)
    args.json_out = sys.stderr if job in JSON_ON_STDERR else sys.stdout
    home = open_home(args.home)
    if home is None:
        return _json_result(as_json, job, EXIT_ERROR, {}, "CLIENT_HOME", "no client home there")
    lock = HomeLock(home.path)
    try:
        if job not in READ_ONLY_JOBS and not config.lock_held:
            lock.acquire()   # (lock_held: the caller holds it, e.g. --stdin-from-command)
        with (contextlib.redirect_stdout(sys.stderr) if as_json and job not in JSON_ON_STDERR
              else contextlib.nullcontext()):
            code = run_reactor(lambda reactor: _job(reactor, home, args, job, config))
    except (UserError, HomeBusy, *_refusals()) as err:
        print(f"error: {err}", file=sys.stderr)
        return _json_result(as_json, job, EXIT_ERROR, args.summary, _error_code(err), str(err))
    except BrokenPipeError:
        raise   # the reader went away: main() says so (EXIT_BROKEN_PIPE)
    except Exception as err:
        return _crashed(as_json, job, args.summary, err)
    finally:
        lock.release()
        home.close()
    return _json_result(as_json, job, code, args.summary)


def _error_code(err) -> str:
    """The stable code of what ended a job: its own, or that of the typed
    error a job turned into a UserError (`raise UserError(...)` in an
    `except FludError`), so --json says STALE_ROOT, not JOB_FAILED."""
    return (getattr(err, "code", None) or getattr(err.__context__, "code", None)
            or "JOB_FAILED")


def _refusals() -> tuple:
    """A head a job may not write after (stale, forked, another home's) or
    could not move (no majority took the root): exit 2 with the message."""
    from flud.client.repository.head import REFUSALS
    return REFUSALS


def _crashed(as_json, job, summary, err) -> int:
    """A job that ended in an error no handler turned into a message: the
    job was not done (EXIT_ERROR, never 1's "done, something skipped"), and
    --json still gets its one object. A typed error says what it is; any
    other is a bug, and its traceback goes to stderr for the report."""
    from flud.errors import FludError

    if isinstance(err, FludError):
        message = f"{job} could not be done: {err}"
    else:
        import traceback
        traceback.print_exception(err, file=sys.stderr)
        message = (f"{job} failed unexpectedly: {type(err).__name__}: {err} (a bug: please "
                   f"report it with the traceback above)")
    print(f"error: {message}", file=sys.stderr)
    return _json_result(as_json, job, EXIT_ERROR, summary,
                        getattr(err, "code", "UNEXPECTED"), message)


def _summary(args) -> dict:
    """Where a job leaves its summary for --json (a caller's args may lack it)."""
    return vars(args).setdefault("summary", {})


def _json_result(as_json, job, code, summary, error_code=None, message=None) -> int:
    """With --json: the error line (if the job ended in one) and the
    summary line, last (docs/json.md)."""
    if as_json:
        from flud.cli.jsonlines import line, summary_line

        out = sys.stderr if job in JSON_ON_STDERR else sys.stdout
        record = {"command": job, "exit": code, **summary}
        if error_code:
            record["error"] = {"code": error_code, "message": message}
            print(line("error", job, level="error", code=error_code, message=message), file=out)
        print(summary_line(job, record), file=out)
    return code


@defer.inlineCallbacks
def _job(reactor, home, args, job, config: RunConfig = None):
    from flud.client.network import Network, NotEnoughNodes
    from flud.client.progress import Progress
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool

    config = config or RunConfig.from_args(args)
    from flud.lean import proc_rss, release_free_memory
    monitor = MemoryMonitor(rss_reader=proc_rss, budget_bytes=config.budget_bytes())
    pool = CPUPool(reactor, size=2)
    network = Network(reactor, home.path, home.bootstrap(),
                      upload_limit=config.upload_limit, download_limit=config.download_limit)
    from flud.cli.bandwidth import follow_schedule
    schedule = follow_schedule(reactor, network, config.limit_schedule)
    load_job_code(job)
    from flud.client.trust_view import TrustView
    trust = network.trust = TrustView.of_home(home.path, home.identity, reactor.seconds)
    release_free_memory()  # what start-up freed goes back to the OS
    # The static footprint: the client ready to work (its code loaded, its
    # identity and TLS contexts made), before any connection or transfer.
    monitor.sample()
    monitor.mark_static()
    if config.memory_log:
        monitor.open_log(config.memory_log)
    monitor.start_sampling(reactor)
    progress = Progress(job)
    lines = None
    if config.as_json and getattr(args, "json_out", None) is not None:
        from flud.cli.jsonlines import JsonLines
        lines = JsonLines(reactor, args.json_out, job, progress)
        lines.start()
    renewing = None
    try:
        try:
            count = yield network.discover(enough=_enough_nodes(home, trust))
        except NotEnoughNodes as err:
            raise UserError(str(err))
        args.job = job
        # The renewal runs beside the job's start (its own round trip to
        # every node, beside the root lookup's): waited for below, so a job
        # that then fails still kept the data alive.
        renewing = _renew_leases(home, network, args, job)
        if count < home.config["n"] and job == "backup":
            raise UserError(f"only {count} nodes are known; n={home.config['n']} shares need "
                            f"that many distinct nodes. Start more nodes or init with a lower --n.")
        if trust.friends_only and job == "backup":
            friends = sum(1 for nid in network.nodes if nid in trust.trusted)
            if friends < home.config["n"]:
                raise UserError(f"this home keeps to friends, and only {friends} of the "
                                f"{count} nodes known are certified; n={home.config['n']} "
                                f"shares need that many. Certify more (`flud friends add`) "
                                f"or allow others (`flud friends only off`).")
        runner = {"backup": _backup, "restore": _restore, "verify": _verify, "dump": _dump,
                  "ls": _browse, "find": _browse, "diff": _browse, "stats": _browse,
                  "forget": _retain, "prune": _retain, "tag": _retain, "check": _check,
                  "adopt": _adopt}[job]
        code = yield runner(reactor, home, network, pool, monitor, progress, args)
        renewed, renewing = renewing, None
        yield renewed   # its error, if it had one, is the job's
        # what the run used, for every job's --json summary (MemoryResult)
        _summary(args).setdefault("memory", monitor.snapshot())
    finally:
        if renewing is not None:   # the job failed: the renewal still ends first
            yield _settled(renewing)
        health = getattr(network, "health", None)
        if health is not None:   # the nodes failed this run, for --json (docs/json.md)
            for key, value in health.summary().items():
                _summary(args).setdefault(key, value)
        if lines is not None:
            lines.stop()
        monitor.sample()
        monitor.stop_sampling()
        monitor.close_log()
        schedule.stop()
        network.close()
        pool.stop()
        # what this run saw (a test's fake network counts no outcomes)
        trust.end_run(getattr(network, "outcomes", {}), network.failed)
        trust.close()
    return code


# Known live nodes past which a job starts without waiting for the random
# walks (Network.discover): this many times n gives placement its choice and
# the root's home set its ranks; the walks still run, and their nodes join.
ENOUGH_NODES_PER_SHARE = 4


def _enough_nodes(home, trust):
    """None (always wait for the walks) for a home that keeps to friends:
    the walks may be what finds them."""
    if trust.friends_only:
        return None
    return ENOUGH_NODES_PER_SHARE * home.config["n"]


def _settled(d):
    """d, its failure (already reported by the job's own) dropped."""
    return d.addErrback(lambda failure: log.debug("lease renewal: %s", failure.value))


@defer.inlineCallbacks
def _renew_leases(home, network, args, job):
    """Renew the nodes' leases before the job itself runs, so that a job that
    then fails (a backup short of nodes, a restore that breaks) still kept
    the data alive; its summary says until when (the status page shows it)."""
    from types import SimpleNamespace
    from flud.client.lease_renewal import JOBS_THAT_RENEW, kept_until, renew_leases

    if job in JOBS_THAT_RENEW:
        yield renew_leases(SimpleNamespace(index=home.index, network=network))
        _summary(args)["leases"] = kept_until(home.index)


# What each job runs, imported before the static sample: these and the
# native libraries they load (zfec, BLAKE3, the AES modes) are a fixed cost of
# the process, not of a transfer.
_AES_MODES = ("Crypto.Cipher._mode_ctr", "Crypto.Cipher._mode_gcm", "Crypto.Cipher._mode_ecb")
_READ = ("flud.client.repository.snapshot_lookup", "flud.client.repository.reader", "flud.client.restore.tree_restore",
         "flud.client.repository.root_store",
         "flud.client.network",   # TLS: its libcrypto serves the segments' AES-CTR too
         *_AES_MODES)
JOB_MODULES = {
    "backup": ("flud.client.backup.backup_job", *_READ),
    "restore": ("flud.client.restore.restore_job", *_READ),
    "dump": ("flud.client.restore.dump_job", *_READ),
    "verify": ("flud.client.verify.verify_job", *_READ),
    "ls": ("flud.cli.browse", *_READ),
    "find": ("flud.cli.browse", *_READ),
    "diff": ("flud.cli.browse", *_READ),
    "stats": ("flud.cli.browse", "flud.client.repository.tree_stats", *_READ),
    "forget": ("flud.cli.retain", "flud.client.backup.small_files", *_READ),
    "prune": ("flud.cli.retain", "flud.client.backup.small_files", *_READ),
    "tag": ("flud.cli.retain", "flud.client.backup.small_files", *_READ),
    "check": ("flud.cli.check", "flud.client.backup.small_files", *_READ),
    "adopt": ("flud.client.repository.head_adopt", *_READ),
}


def load_job_code(job: str) -> None:
    import importlib
    for name in JOB_MODULES[job]:
        importlib.import_module(name)


def _memory_line(monitor) -> str:
    snap = monitor.snapshot()
    return (f"memory: peak per transfer {human_bytes(snap['peak_transfer_bytes'])}, "
            f"process peak RSS {human_bytes(snap['peak_rss'])} "
            f"(static {human_bytes(snap['static_rss'])})")


def _typed(user_error, err):
    """A UserError that keeps the FludError's stable code (for --json)."""
    user_error.code = err.code
    return user_error


@defer.inlineCallbacks
def _backup(reactor, home, network, pool, monitor, progress, args):
    from flud.client.backup.backup_job import Backup
    from flud.client.repository.segments import StoreFailed
    from flud.errors import FludError

    config = BackupConfig.from_args(args)
    stream = config.stream   # --stdin-from-command (backup_modes.py)
    parts = {}
    if stream is not None:
        from flud.client.backup.command_stream import streaming_large_files
        parts = {"large_files": streaming_large_files(stream)}
    job = Backup(reactor, home, network, pool, monitor, progress,
                 parallel_files=config.parallel_files, **parts)
    try:
        result = yield job.run(list(config.paths), config.excludes, tags=list(config.tags))
    except StoreFailed as err:
        raise _typed(UserError(f"{str(err).rstrip('.')}. Nothing that landed is lost: "
                               f"run the backup again."), err)
    except FludError as err:   # typed: exit 2 with its code under --json, no traceback
        raise _typed(UserError(f"the backup stopped: {err}"), err)
    s = result
    if stream is not None:
        _summary(args)["stdin"] = {"command": stream.argv, "bytes": stream.bytes,
                                   "filename": os.path.basename(stream.path)}
    _summary(args).update(s, memory=monitor.snapshot(), skipped_paths=job.skipped[:20],
                          too_large_paths=job.too_large)
    done = BackupResult.from_summary(s)   # the record --json and the text both show
    _summary(args).update(done.to_json())
    for text in done.text_lines(home.config["n"]):
        print(text)
    print(_memory_line(monitor))
    for path, why in job.skipped[:20]:
        print(f"  skipped {path}: {why}")
    for path, why in job.too_large:
        print(f"  excluded {path}: {why}")
    return EXIT_SKIPPED if done.skipped else EXIT_OK


@defer.inlineCallbacks
def _browse(reactor, home, network, pool, monitor, progress, args):
    from flud.cli import browse

    ctx = _context(reactor, home, network, pool, monitor, progress)
    code = yield getattr(browse, args.job)(ctx, args)
    return code


@defer.inlineCallbacks
def _retain(reactor, home, network, pool, monitor, progress, args):
    from flud.cli import retain

    ctx = _context(reactor, home, network, pool, monitor, progress)
    code = yield getattr(retain, args.job)(ctx, args)
    if args.job == "prune" or (args.job == "forget" and args.prune and not args.dry_run):
        print(_memory_line(monitor))  # prune's peak RSS is held to static + budget
    return code


@defer.inlineCallbacks
def _check(reactor, home, network, pool, monitor, progress, args):
    from flud.cli import check

    code = yield check.check(_context(reactor, home, network, pool, monitor, progress), args)
    # stdout is one JSON object with --json: the memory line goes to stderr then
    print(_memory_line(monitor), file=sys.stderr if args.json else sys.stdout)
    return code


@defer.inlineCallbacks
def _adopt(reactor, home, network, pool, monitor, progress, args):
    """`flud adopt`: this home becomes the writer of the nodes' head."""
    from flud.client.repository.head_adopt import adopt
    from flud.client.repository.root_store import ManifestMissing

    try:
        head, was = yield adopt(_context(reactor, home, network, pool, monitor, progress),
                                accept_older=AdoptConfig.from_args(args).accept_older)
    except ManifestMissing as err:
        raise UserError(str(err))
    snapshots = [s["id"] for s in home.index.snapshots()]
    _summary(args).update(generation=head.generation, home_id=home.home_id,
                          previous_writer=was or None, snapshots=snapshots)
    print(f"this home ({home.home_id[:8]}) now writes the repository (generation "
          f"{head.generation}); {len(snapshots)} snapshot(s) listed"
          + (f"; home {was[:8]} is refused from now on" if was else ""))
    return EXIT_OK


def _context(reactor, home, network, pool, monitor, progress):
    from flud.client.context import JobContext
    from flud.coding import SegmentCoder

    return JobContext(reactor, home, network, pool, monitor, progress,
                      SegmentCoder(home.config["k"], home.config["n"]))


@defer.inlineCallbacks
def _find(ctx, snapshot, **callbacks):
    """The snapshot asked for (or the newest), as a snapshots.Found."""
    from flud.client.repository.root_store import ManifestMissing
    from flud.client.repository.snapshot_lookup import NoSuchSnapshot, find_snapshot
    from flud.errors import FludError

    try:
        found = yield find_snapshot(ctx, snapshot, **callbacks)
    except (ManifestMissing, NoSuchSnapshot) as err:
        raise UserError(str(err))
    except FludError as err:
        raise UserError(f"the snapshot cannot be read: {err}")
    return found


@defer.inlineCallbacks
def _shares_for(home, network, pool, snapshot, reactor=None, monitor=None, progress=None):
    """The shares a snapshot uses, as a verify.ShareSet: a version-2 tree
    walked directory by directory, or a version-1 manifest's."""
    from flud.client.verify.share_set import ShareSet
    from flud.client.verify.tree_shares import tree_shares

    found = yield _find(_context(reactor, home, network, pool, monitor, progress), snapshot)
    try:
        if found.manifest is not None:
            return ShareSet.of_manifest(found.manifest)
        shares = yield tree_shares(found.repo, found.record_id, found.record,
                                   home.config["k"], home.index)
    finally:
        found.close()
    return shares


@defer.inlineCallbacks
def _restore(reactor, home, network, pool, monitor, progress, args):
    from flud.client.restore.restore_job import Restore, RestoreError
    from flud.client.restore.tree_restore import TreeRestore

    ctx = _context(reactor, home, network, pool, monitor, progress)
    start = reactor.seconds()
    record_retrieves = [0]   # of the snapshot's records (root, map, tree), by the repository

    def count(n):
        record_retrieves[0] += n
    from flud.client.pathmatch import PatternError
    from flud.client.restore.selection import Selection
    cfg = RestoreConfig.from_args(args)
    found = yield _find(ctx, cfg.snapshot, count_retrieves=count, cached=True)
    steer = cfg.steer
    include, exclude = cfg.include, cfg.exclude
    if cfg.dry_run:
        try:
            return (yield _restore_dry_run(ctx, found, args, cfg, steer, include, exclude))
        finally:
            found.close()
    try:
        if found.manifest is not None:
            if cfg.delete:
                raise RestoreError("--delete needs a snapshot made by flud 2 or later; this "
                                   "one is a version-1 manifest")
            job = Restore(reactor, home, network, pool, monitor, progress, found.manifest,
                          **steer)
            selection = Selection(include, exclude, found.manifest.get("roots", ()))
            s = yield job.run(cfg.to, cfg.paths, selection)
        else:
            job = Restore(reactor, home, network, pool, monitor, progress,
                          {"k": home.config["k"], "n": home.config["n"],
                           "bundles": found.repo.bundles}, **steer)
            s = yield TreeRestore(job, found.repo, found.record, include, exclude,
                                  cfg.delete, numeric_ids=cfg.numeric_ids
                                  ).run(cfg.to, cfg.paths)
    except (RestoreError, PatternError) as err:
        raise _typed(UserError(str(err)), err)
    finally:
        found.close()
    elapsed = reactor.seconds() - start
    _summary(args).update(s, snapshot=found.snapshot_id, elapsed=elapsed,
                          record_retrieves=record_retrieves[0],
                          bad_shares=len(job.bad_shares), unreachable=dict(job.unreachable),
                          unmatched_paths=job.unmatched[:100],
                          deleted_paths=[p for p, _ in job.deleted_paths[:100]],
                          failed_paths=[{"path": p, "why": w} for p, w in job.failed[:100]],
                          not_set=[{"path": p, "what": w}
                                   for p, w in getattr(job, "not_set", [])[:100]])
    done = RestoreResult.from_summary(_summary(args))   # what --json and the text both show
    print(done.text_line(cfg.to))
    _steered(s, job, cfg)
    if s["beside"]:
        print(f"{s['beside']} path(s) already existed: restored beside them as *.flud-restored")
    not_set = _not_set(job, s)
    if s["refused"]:
        print(f"{s['refused']} refused: their path under {cfg.to} passes through a symlink "
              f"or something that is not a directory (never followed), or is not a plain "
              f"relative path; the rest is restored")
        _listed(job.refused, "refused")
    for path in job.unmatched[:20]:
        print(f"  nothing in the snapshot matches {path}: not restored")
    for node_hex, key_hex, why in job.bad_shares[:20]:
        print(f"  bad share {key_hex[:16]} on node {node_hex[:12]}: {why}")
    for node_hex, shares in job.unreachable.items():
        print(f"  node {node_hex[:12]} unreachable: {shares} of its shares came from "
              f"other holders")
    unconfirmed = found.repo.unconfirmed if found.repo is not None else ""
    if unconfirmed:
        # what was restored is whole, but may not be the newest snapshot
        print(f"  not sure this is the newest snapshot: {unconfirmed}")
        _summary(args).update(root_unconfirmed=unconfirmed)
    print(_memory_line(monitor))
    if s["failed"]:
        _listed(job.failed, "failed")
        return EXIT_ERROR
    return (EXIT_SKIPPED if s["refused"] or s["unmatched"] or unconfirmed or not_set
            else EXIT_OK)


def _not_set(job, s) -> int:
    """What a version-3 snapshot's restore could not set of its entries'
    metadata (restore/meta_restore.py): said, counted; its number."""
    if s.get("hardlinks") or s.get("specials"):
        print(f"{s.get('hardlinks', 0)} hard link(s) made, {s.get('specials', 0)} FIFO(s) "
              f"and device node(s) made")
    count = s.get("meta_not_set", 0)
    if count:
        print(f"{count} path(s) restored without some of their metadata "
              f"(the destination refused it, or it needs root):")
        for path, what in getattr(job, "not_set", [])[:20]:
            print(f"  {path}: {what}")
    return count


@defer.inlineCallbacks
def _dump(reactor, home, network, pool, monitor, progress, args):
    """flud dump: the bytes go to stdout, everything said to stderr."""
    from flud.client.restore.dump_job import DumpError, dump_snapshot
    from flud.client.repository.segments import FetchFailed

    out = sys.stdout.buffer
    if out.isatty():
        raise UserError("flud dump writes a file's bytes (or a tar stream): redirect stdout "
                        "to a file or a pipe (`flud dump ... > out.tar`)")
    config = DumpConfig.from_args(args)
    ctx = _context(reactor, home, network, pool, monitor, progress)
    start = reactor.seconds()
    found = yield _find(ctx, config.snapshot, cached=True)
    try:
        dump = yield dump_snapshot(ctx, found, config.path, out)
    except DumpError as err:
        raise _typed(UserError(str(err)), err)
    except FetchFailed as err:
        raise _typed(UserError(f"the dump stopped: {err}; what was written is cut short"),
                     err)
    finally:
        found.close()
    s = dump.summary
    elapsed = reactor.seconds() - start
    _summary(args).update(s, snapshot=found.snapshot_id, elapsed=elapsed,
                          damaged=[{"path": d.path, "why": d.why} for d in dump.damaged])
    what = "a tar stream" if dump.as_tar else "a file"
    print(f"dumped {config.path} of snapshot {found.snapshot_id} as {what}: {s['files']} "
          f"files, {s['dirs']} dirs, {s['symlinks']} symlinks, {human_bytes(s['bytes'])} "
          f"in {elapsed:.2f} s", file=sys.stderr)
    print(_memory_line(monitor), file=sys.stderr)
    for damaged in dump.damaged[:20]:
        print(f"  not dumped {damaged.path}: {damaged.why}", file=sys.stderr)
    return EXIT_ERROR if dump.damaged else EXIT_OK


@defer.inlineCallbacks
def _restore_dry_run(ctx, found, args, cfg, steer, include, exclude):
    from flud.client.pathmatch import PatternError
    from flud.client.restore.dry_run import DryRun
    from flud.client.restore.restore_job import RestoreError
    from flud.client.restore.tree_restore import TreeRestore

    if found.manifest is not None:
        raise UserError("--dry-run needs a snapshot made by flud 2 or later; this one is a "
                        "version-1 manifest")
    job = DryRun(ctx, **steer)
    try:
        s = yield TreeRestore(job, found.repo, found.record, include, exclude,
                              cfg.delete).run(cfg.to, cfg.paths)
    except (RestoreError, PatternError) as err:
        raise _typed(UserError(str(err)), err)
    _summary(args).update(s, snapshot=found.snapshot_id, dry_run=True,
                          unmatched_paths=job.unmatched[:100],
                          deleted_paths=[p for p, _ in job.deleted_paths[:100]])
    print(f"dry run of snapshot {found.snapshot_id} into {cfg.to} (--overwrite "
          f"{cfg.overwrite}): nothing fetched or written")
    print(f"  would write {s['files']} files ({human_bytes(s['bytes'])}): {s['new']} new, "
          f"{s['replaced']} replacing what is there, {s['beside']} beside what is there "
          f"(NAME.flud-restored), {s['resumed']} from a killed run's temp")
    print(f"  {s['unchanged']} files already in place as the snapshot has them; "
          f"{s['dirs']} dirs, {s['symlinks']} symlinks")
    print(f"  would fetch about {human_bytes(s['fetch_bytes'])} of file data")
    if cfg.delete:
        print(f"  would delete {s['deleted']} path(s) not in the snapshot")
        _listed([(p, "directory" if d else "file") for p, d in job.deleted_paths],
                 "would delete")
    for path in job.unmatched[:20]:
        print(f"  nothing in the snapshot matches {path}")
    if s["refused"]:
        _listed(job.refused, "refused")
    return EXIT_SKIPPED if s["refused"] or s["unmatched"] or job.failed else EXIT_OK


def _steered(s, job, cfg) -> None:
    """What --overwrite and --delete did, and what the files cost to fetch."""
    print(f"fetched {human_bytes(s['fetched_bytes'])} of file data"
          + (f"; {human_bytes(s['reused_bytes'])} already under {cfg.to} was used "
             f"({s['resumed']} file(s) resumed)" if s["reused_bytes"] else ""))
    if s["unchanged"]:
        print(f"{s['unchanged']} path(s) already in place as the snapshot has them: kept")
    if s["replaced"]:
        print(f"{s['replaced']} path(s) replaced (--overwrite {cfg.overwrite})")
    if s["deleted"]:
        print(f"{s['deleted']} path(s) under {cfg.to} deleted: not in the snapshot (--delete)")
        _listed([(p, "directory" if d else "file") for p, d in job.deleted_paths], "deleted")


def _listed(items, what, most=20) -> None:
    for rel, why in items[:most]:
        print(f"  {what} {rel}: {why}")
    if len(items) > most:
        print(f"  ... and {len(items) - most} more {what}")


@defer.inlineCallbacks
def _verify(reactor, home, network, pool, monitor, progress, args):
    from flud.client.repository.segments import CHALLENGES_PER_SHARE
    from flud.client.verify.verify_job import (challenge_index, describe_round, short_of_k, summary_line,
                                    verify)

    config = VerifyConfig.from_args(args)
    shares = yield _shares_for(home, network, pool, config.snapshot, reactor, monitor, progress)
    full = config.full
    round_number = home.index.get_meta("verify_round", 0)
    kind = challenge_index(round_number, CHALLENGES_PER_SHARE, full)
    heading = "full check" if full else f"round {round_number}"
    print(f"verify ({heading}): {describe_round(kind)}")
    per_node, bad = yield verify(network, home.secret, shares, round_number, config.sample,
                                 full=full)
    trust = getattr(network, "trust", None)
    if trust is not None:   # what this home saw its nodes keep, or lose
        trust.verified(per_node)
    if not full:  # a full check takes no turn from the rounds' spot/whole rotation
        home.index.set_meta("verify_round", round_number + 1)
    totals = _verify_table(per_node)
    damaged = shares.damaged
    # never healthier than a restore: what it could not rebuild (every share
    # was asked; a sample says nothing of the rest)
    short = short_of_k(shares, bad) if config.sample >= 1.0 else []
    done = VerifyResult(snapshot=shares.snapshot, full=full, round=round_number,
                        totals=totals, nodes=per_node, unreadable=len(damaged),
                        damaged=[{"path": p, "why": w} for p, w in damaged[:100]],
                        bad=[{"node": n, "share": k, "what": w} for n, k, w in bad[:100]],
                        short_of_k=len(short), root_unconfirmed=shares.unconfirmed or "")
    _summary(args).update(done.to_json())
    for node_hex, key_hex, what in bad[:20]:
        print(f"  {what}: share {key_hex[:16]} on node {node_hex[:12]}")
    print(summary_line(kind, totals["confirmed"], sum(totals.values())))
    if short:
        print(f"{len(short)} object(s) with fewer than k shares confirmed: a restore now "
              f"could not rebuild them")
        for what in short[:20]:
            print(f"  {what}")
    if damaged:
        # what a restore could not read: its subtree (or file) was not checked
        print(f"{len(damaged)} record(s) could not be read: what they hold was not verified "
              f"and a restore would miss it")
        _listed(damaged, "unreadable")
    if done.root_unconfirmed:   # what was verified is the newest snapshot these nodes show
        print(f"not sure this is the newest snapshot: {done.root_unconfirmed}")
    if damaged or short:
        return EXIT_ERROR
    return EXIT_OK if not bad and not done.root_unconfirmed else EXIT_SKIPPED


def _verify_table(per_node) -> dict:
    """Print verify's counts per node and in total; the totals."""
    from flud.client.verify.verify_job import OUTCOMES

    print(f"{'node':12} " + " ".join(f"{what:>11}" for what in OUTCOMES))
    totals = dict.fromkeys(OUTCOMES, 0)
    for node_hex, counts in sorted(per_node.items()):
        print(f"{node_hex[:12]} " + " ".join(f"{counts[what]:>11}" for what in OUTCOMES))
        for what in OUTCOMES:
            totals[what] += counts[what]
    print(f"{'total':12} " + " ".join(f"{totals[what]:>11}" for what in OUTCOMES))
    return totals
