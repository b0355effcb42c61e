"""The client's composition root: one job (backup, restore, verify) under a
reactor. It sets up the memory monitor, the CPU pool, the network and the
progress, runs the job and prints its summary."""
import contextlib
import json
import logging
import sys

from twisted.internet import defer

from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED, UserError
from flud.cli.home import open_home
from flud.cli.runner import run_reactor
from flud.agent.lock import HomeBusy, HomeLock
from flud.client.progress import human_bytes

log = logging.getLogger("flud.client")


# Jobs that change nothing on the nodes or in the index run beside any other.
READ_ONLY_JOBS = {"ls", "find", "diff"}


def run_client(args, job: str) -> int:
    """Run the job under the home's job lock (READ_ONLY_JOBS aside). With
    --json, what it prints goes to stderr and its summary (args.summary,
    filled by the job) is one JSON object on stdout."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    as_json = getattr(args, "json", False)
    args.summary = {}
    home = open_home(args.home)
    if home is None:
        return _json_result(as_json, job, EXIT_ERROR, {}, "CLIENT_HOME", "no client home there")
    lock = HomeLock(home.path)
    try:
        if job not in READ_ONLY_JOBS:
            lock.acquire()
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            code = run_reactor(lambda reactor: _job(reactor, home, args, job))
    except (UserError, HomeBusy) as err:
        print(f"error: {err}", file=sys.stderr)
        return _json_result(as_json, job, EXIT_ERROR, args.summary,
                            getattr(err, "code", "JOB_FAILED"), str(err))
    finally:
        lock.release()
        home.close()
    return _json_result(as_json, job, code, args.summary)


def _summary(args) -> dict:
    """Where a job leaves its summary for --json (a caller's args may lack it)."""
    return vars(args).setdefault("summary", {})


def _json_result(as_json, job, code, summary, error_code=None, message=None) -> int:
    if as_json:
        record = {"command": job, "exit": code, **summary}
        if error_code:
            record["error"] = {"code": error_code, "message": message}
        print(json.dumps(record, default=str))
    return code


@defer.inlineCallbacks
def _job(reactor, home, args, job):
    from flud.client.network import Network, NotEnoughNodes
    from flud.client.progress import Progress
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool

    from flud.lean import proc_rss, release_free_memory
    from flud.memory import DEFAULT_BUDGET
    monitor = MemoryMonitor(rss_reader=proc_rss,
                            budget_bytes=getattr(args, "memory_budget", None) or DEFAULT_BUDGET)
    pool = CPUPool(reactor, size=2)
    network = Network(reactor, home.path, home.bootstrap(),
                      upload_limit=getattr(args, "limit_upload", 0),
                      download_limit=getattr(args, "limit_download", 0))
    load_job_code(job)
    release_free_memory()  # what start-up freed goes back to the OS
    # The static footprint: the client ready to work (its code loaded, its
    # identity and TLS contexts made), before any connection or transfer.
    monitor.sample()
    monitor.mark_static()
    if getattr(args, "memory_log", None):
        monitor.open_log(args.memory_log)
    monitor.start_sampling(reactor)
    progress = Progress(job)
    try:
        try:
            count = yield network.discover()
        except NotEnoughNodes as err:
            raise UserError(str(err))
        args.job = job
        if count < home.config["n"] and job == "backup":
            raise UserError(f"only {count} nodes are known; n={home.config['n']} shares need "
                            f"that many distinct nodes. Start more nodes or init with a lower --n.")
        runner = {"backup": _backup, "restore": _restore, "verify": _verify,
                  "ls": _browse, "find": _browse, "diff": _browse,
                  "forget": _retain, "prune": _retain, "tag": _retain, "check": _check}[job]
        code = yield runner(reactor, home, network, pool, monitor, progress, args)
    finally:
        monitor.sample()
        monitor.stop_sampling()
        monitor.close_log()
        network.close()
        pool.stop()
    return code


# What each job runs, imported before the static sample: these and the
# native libraries they load (zfec, BLAKE3, the AES modes) are a fixed cost of
# the process, not of a transfer.
_AES_MODES = ("Crypto.Cipher._mode_ctr", "Crypto.Cipher._mode_gcm", "Crypto.Cipher._mode_ecb")
_READ = ("flud.client.snapshots", "flud.client.repo", "flud.client.restore.tree",
         "flud.client.manifest", *_AES_MODES)
JOB_MODULES = {
    "backup": ("flud.client.backup.run", *_READ),
    "restore": ("flud.client.restore.run", *_READ),
    "verify": ("flud.client.verify", *_READ),
    "ls": ("flud.cli.browse", *_READ),
    "find": ("flud.cli.browse", *_READ),
    "diff": ("flud.cli.browse", *_READ),
    "forget": ("flud.cli.retain", "flud.client.backup.small", *_READ),
    "prune": ("flud.cli.retain", "flud.client.backup.small", *_READ),
    "tag": ("flud.cli.retain", "flud.client.backup.small", *_READ),
    "check": ("flud.cli.check", "flud.client.backup.small", *_READ),
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
    from flud.client.backup.run import Backup
    from flud.client.segments import StoreFailed
    from flud.errors import FludError

    job = Backup(reactor, home, network, pool, monitor, progress,
                 parallel_files=args.parallel_files)
    try:
        result = yield job.run(args.paths, args.exclude, tags=args.tag)
    except StoreFailed as err:
        raise _typed(UserError(f"{str(err).rstrip('.')}. Nothing that landed is lost: "
                               f"run the backup again."), err)
    except FludError as err:   # typed: exit 2 with its code under --json, no traceback
        raise _typed(UserError(f"the backup stopped: {err}"), err)
    s = result
    _summary(args).update(s, memory=monitor.snapshot(), skipped_paths=job.skipped[:20])
    rate = s["bytes_read"] / s["elapsed"] if s["elapsed"] else 0
    print(f"snapshot {s['snapshot']}: {s['files']} files "
          f"({s['new']} new, {s['changed']} changed, {s['unchanged']} unchanged, "
          f"{s['skipped']} skipped, {s['dedup']} deduplicated)")
    print(f"read {human_bytes(s['bytes_read'])}, sent {human_bytes(s['bytes_sent'])} in "
          f"{s['stores']} STOREs ({s['tars']} tars), {s['elapsed']:.2f} s, "
          f"{human_bytes(rate)}/s")
    if s.get("reduced_redundancy"):
        print(f"reduced redundancy: {s['reduced_redundancy']} bundles have fewer than "
              f"n={home.config['n']} distinct holders (too few nodes were up); "
              f"`flud check --repair` spreads them out once more nodes are up")
    print(_memory_line(monitor))
    for path, why in job.skipped[:20]:
        print(f"  skipped {path}: {why}")
    return EXIT_SKIPPED if s["skipped"] else EXIT_OK


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


def _context(reactor, home, network, pool, monitor, progress):
    from flud.client.context import JobContext
    from flud.coding import SegmentCoder

    return JobContext(reactor, home, network, pool, monitor, progress,
                      SegmentCoder(home.config["k"], home.config["n"]))


@defer.inlineCallbacks
def _find(ctx, snapshot, **callbacks):
    """The snapshot asked for (or the newest), as a snapshots.Found."""
    from flud.client.manifest import ManifestMissing
    from flud.client.snapshots import NoSuchSnapshot, find_snapshot
    from flud.errors import FludError

    try:
        found = yield find_snapshot(ctx, snapshot, **callbacks)
    except (ManifestMissing, NoSuchSnapshot) as err:
        raise UserError(str(err))
    except FludError as err:
        raise UserError(f"the snapshot cannot be read: {err}")
    return found


@defer.inlineCallbacks
def _manifest_for(home, network, pool, snapshot, reactor=None, monitor=None, progress=None):
    """A snapshot as a version-1 manifest (a version-2 one flattened: for
    verify, which reads every share of the snapshot anyway)."""
    from flud.client.restore.tree import flatten
    from flud.client.verify import IndexChallenges

    found = yield _find(_context(reactor, home, network, pool, monitor, progress), snapshot)
    try:
        if found.manifest is not None:
            return found.manifest
        manifest = yield flatten(found.repo, found.record, home.config["k"], home.config["n"])
        # read now: the map's cache goes with the repository
        manifest["challenges"] = _Resolved(IndexChallenges(home.index, found.repo.cache),
                                           manifest)
    finally:
        found.close()
    return manifest


class _Resolved(dict):
    """The challenges of every share a flattened snapshot uses, looked up once."""

    def __init__(self, challenges, manifest):
        from flud.client.verify import share_locations
        super().__init__((key, challenges.get(key)) for key, _ in share_locations(manifest))


@defer.inlineCallbacks
def _restore(reactor, home, network, pool, monitor, progress, args):
    from flud.client.restore.run import Restore, RestoreError
    from flud.client.restore.tree import TreeRestore

    ctx = _context(reactor, home, network, pool, monitor, progress)
    start = reactor.seconds()
    record_retrieves = [0]   # of the snapshot's records (root, map, tree), by the repository

    def count(n):
        record_retrieves[0] += n
    found = yield _find(ctx, args.snapshot, count_retrieves=count)
    try:
        if found.manifest is not None:
            job = Restore(reactor, home, network, pool, monitor, progress, found.manifest)
            s = yield job.run(args.to, args.paths)
        else:
            job = Restore(reactor, home, network, pool, monitor, progress,
                          {"k": home.config["k"], "n": home.config["n"],
                           "bundles": found.repo.bundles})
            s = yield TreeRestore(job, found.repo, found.record).run(args.to, args.paths)
    except RestoreError as err:
        raise UserError(str(err))
    finally:
        found.close()
    elapsed = reactor.seconds() - start
    _summary(args).update(s, snapshot=found.snapshot_id, elapsed=elapsed,
                          record_retrieves=record_retrieves[0],
                          bad_shares=len(job.bad_shares), unreachable=dict(job.unreachable))
    print(f"restored snapshot {found.snapshot_id} to {args.to}: {s['files']} files, "
          f"{s['dirs']} dirs, {s['symlinks']} symlinks, {human_bytes(s['bytes'])} in "
          f"{elapsed:.2f} s ({human_bytes(s['bytes'] / elapsed if elapsed else 0)}/s), "
          f"{s['retrieves'] + record_retrieves[0]} RETRIEVEs "
          f"({record_retrieves[0]} of them for the snapshot's records)")
    if s["beside"]:
        print(f"{s['beside']} path(s) already existed: restored beside them as *.flud-restored")
    if s["refused"]:
        print(f"{s['refused']} refused: their path under {args.to} passes through a symlink "
              f"or something that is not a directory (never followed), or is not a plain "
              f"relative path; the rest is restored")
        _listed(job.refused, "refused")
    for node_hex, key_hex, why in job.bad_shares[:20]:
        print(f"  bad share {key_hex[:16]} on node {node_hex[:12]}: {why}")
    for node_hex, shares in job.unreachable.items():
        print(f"  node {node_hex[:12]} unreachable: {shares} of its shares came from "
              f"other holders")
    print(_memory_line(monitor))
    if s["failed"]:
        _listed(job.failed, "failed")
        return EXIT_ERROR
    return EXIT_SKIPPED if s["refused"] else EXIT_OK


def _listed(items, what, most=20) -> None:
    for rel, why in items[:most]:
        print(f"  {what} {rel}: {why}")
    if len(items) > most:
        print(f"  ... and {len(items) - most} more {what}")


@defer.inlineCallbacks
def _verify(reactor, home, network, pool, monitor, progress, args):
    from flud.client.segments import CHALLENGES_PER_SHARE
    from flud.client.verify import challenge_index, describe_round, summary_line, verify

    manifest = yield _manifest_for(home, network, pool, args.snapshot, reactor, monitor,
                                   progress)
    full = getattr(args, "full", False)
    round_number = home.index.get_meta("verify_round", 0)
    kind = challenge_index(round_number, CHALLENGES_PER_SHARE, full)
    heading = "full check" if full else f"round {round_number}"
    print(f"verify ({heading}): {describe_round(kind)}")
    per_node, bad = yield verify(network, home.secret, manifest, round_number, args.sample,
                                 full=full)
    if not full:  # a full check takes no turn from the rounds' spot/whole rotation
        home.index.set_meta("verify_round", round_number + 1)
    print(f"{'node':12} {'confirmed':>9} {'missing':>7} {'corrupt':>7} {'unreachable':>11}")
    totals = {"confirmed": 0, "missing": 0, "corrupt": 0, "unreachable": 0}
    for node_hex, counts in sorted(per_node.items()):
        print(f"{node_hex[:12]} {counts['confirmed']:>9} {counts['missing']:>7} "
              f"{counts['corrupt']:>7} {counts['unreachable']:>11}")
        for key in totals:
            totals[key] += counts[key]
    print(f"{'total':12} {totals['confirmed']:>9} {totals['missing']:>7} "
          f"{totals['corrupt']:>7} {totals['unreachable']:>11}")
    _summary(args).update(snapshot=manifest["snapshot"], full=full, round=round_number,
                        totals=totals, nodes=per_node,
                        bad=[{"node": n, "share": k, "what": w} for n, k, w in bad[:100]])
    for node_hex, key_hex, what in bad[:20]:
        print(f"  {what}: share {key_hex[:16]} on node {node_hex[:12]}")
    print(summary_line(kind, totals["confirmed"], sum(totals.values())))
    return EXIT_OK if not bad else EXIT_SKIPPED
