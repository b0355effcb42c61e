"""`flud check [--read-data-subset F|n/N] [--repair]`: challenge a rotating
part of the shares (every share within a week of daily checks), report per
object and per node, and re-create what is below the repair threshold.

Exit codes: 0 every object healthy (or fully repaired); 1 some object is
degraded or at risk (not repaired, or raised only as far as the reachable
nodes allow), or fewer than a majority of the root's holders answered (the
head checked may not be the newest); 2 some object is unavailable or lost: a restore would fail
now (an error as much as any other: the data cannot be read)."""
from twisted.internet import defer

from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED, UserError
from flud.client.context import wall_clock
from flud.client.progress import human_bytes
from flud.client.repair.object_health import CLASSES, HEALTHY, SAFETY_MARGIN
from flud.client.repair.check_job import REPAIRED
from flud.client.repair.repository_check import Check
from flud.cli.job_config import CheckConfig
from flud.cli.results import CheckResult
from flud.errors import FludError


@defer.inlineCallbacks
def check(ctx, args):
    config = CheckConfig.from_args(args)
    m = config.repair_below
    k, n = ctx.coder.k, ctx.coder.n
    if m is not None and not k < m <= n:
        raise UserError(f"--repair-below {m}: give a threshold above k={k} and at most n={n}")
    margin = SAFETY_MARGIN if config.safety_margin is None else config.safety_margin
    if not 0 <= margin <= n - k:
        raise UserError(f"--safety-margin {margin}: give 0 to n-k={n - k}")
    job = Check(ctx, repair=config.repair, subset=config.subset,
                grace=config.unreachable_grace, m=m, clock=wall_clock, margin=margin)
    try:
        report = yield job.run()
    except FludError as err:
        raise UserError(str(err))
    done = CheckResult.from_summary({**report.summary(), "unconfirmed": job.unconfirmed or ""})
    summary = done.to_json()
    counts = summary["counts"]
    vars(args).setdefault("summary", {}).update(summary)  # --json prints it (cli/jobs.py)
    print(f"check: {report.challenged} shares challenged, {report.downloaded} downloaded "
          f"({report.window:.0%} of the cycle)")
    print(f"{'node':12} {'reachable':>9} {'shares':>6} {'ok':>5} {'corrupt':>7} "
          f"{'missing':>7} {'surplus':>7}")
    for node in summary["nodes"]:
        print(f"{node['node'][:12]} {'yes' if node['reachable'] else 'NO':>9} "
              f"{node['shares']:>6} {node['ok']:>5} {node['corrupt']:>7} "
              f"{node['missing']:>7} {node['surplus']:>7}")
    for obj in summary["objects"]:
        line = (f"  {obj['state']}: {obj['id'][:16]} ({obj['healthy']} healthy, "
                f"{obj['unreachable']} unreachable")
        if obj["repaired"]:
            line += f", re-created {len(obj['repaired'])}: {obj['confirmed']} of {obj['n']}"
        print(line + (f"; {obj['error']}" if obj["error"] else "") + ")")
    if job.unconfirmed:
        # what was checked may be an old head: objects of a newer one were not
        print(f"check: not sure this is the newest head: {job.unconfirmed}")
    if job.left_out:
        print(f"check: {job.left_out} object(s) prune is deleting are not counted")
    names = {c: c.replace("_", " ") for c in CLASSES}
    print("objects: " + ", ".join(f"{counts[c]} {names[c]}" for c in CLASSES)
          + f", {counts[REPAIRED]} repaired; re-created {summary['recreated']['shares']} "
          f"shares ({human_bytes(summary['recreated']['bytes'])})")
    if report.unreadable():
        message = (f"{report.unreadable()} object(s) cannot be read now (fewer than k={k} "
                   f"shares on nodes that answer): a restore of what they hold fails; "
                   f"{counts['unavailable']} may come back with their holders, "
                   f"{counts['lost']} are lost")
        print(f"check: {message}")
        # --json: an exit 2 carries its error object, as every command's does
        vars(args)["summary"]["error"] = {"code": "OBJECTS_UNREADABLE", "message": message}
        return EXIT_ERROR
    reduced = [o for o in summary["objects"] if o["unplaced"]]
    if reduced:
        print(f"check: {len(reduced)} object(s) raised only as far as the reachable nodes "
              f"allow (fewer than n={n}): start more nodes to restore full redundancy")
    troubled = sum(counts[c] for c in CLASSES if c != HEALTHY)
    return EXIT_SKIPPED if troubled or job.unconfirmed else EXIT_OK
