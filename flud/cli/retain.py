"""`flud forget`, `flud prune` and `flud tag`: what the repository keeps,
and giving back what nothing kept needs (flud/client/prune/)."""
import datetime

from twisted.internet import defer

from flud import units
from flud.cli.exits import EXIT_OK, EXIT_SKIPPED, UserError
from flud.client.progress import human_bytes
from flud.client.prune import forget as forgetting
from flud.client.prune.prune_job import Prune
from flud.client.prune.retention import Policy, RetentionError, check_policy, parse_duration
from flud.errors import FludError


def policy_of(args) -> Policy:
    try:
        within = parse_duration(args.keep_within) if args.keep_within else None
        policy = Policy(last=args.keep_last, hourly=args.keep_hourly, daily=args.keep_daily,
                        weekly=args.keep_weekly, monthly=args.keep_monthly,
                        yearly=args.keep_yearly, within=within, tags=tuple(args.keep_tag),
                        forget=tuple(str(i) for i in args.snapshots))
        check_policy(policy)
    except RetentionError as err:
        raise UserError(str(err))
    if not policy.has_rules and not policy.forget:
        raise UserError("say what to keep (--keep-last, --keep-daily, ... --keep-within, "
                        "--keep-tag) or which snapshots to forget")
    return policy


def _local_tz():
    return datetime.datetime.now().astimezone().tzinfo


@defer.inlineCallbacks
def forget(ctx, args):
    policy = policy_of(args)
    try:
        kept, removed, _ = yield forgetting.forget(ctx, policy, args.dry_run, _local_tz())
    except FludError as err:
        raise UserError(str(err))
    vars(args).setdefault("summary", {}).update(kept=kept, removed=removed,
                                                dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{kept} snapshot(s) kept, {removed} {verb}")
    if args.prune and not args.dry_run:
        code = yield prune(ctx, args)
        return code
    return EXIT_OK


@defer.inlineCallbacks
def prune(ctx, args):
    try:
        grace = units.parse_seconds(args.grace)
    except units.UnitError as err:
        raise UserError(f"--grace: {err}")
    job = Prune(ctx, grace=grace, max_unused=args.max_unused, dry_run=args.dry_run)
    try:
        s = yield job.run()
    except FludError as err:
        raise UserError(str(err))
    vars(args).setdefault("summary", {})["prune"] = s
    if not args.dry_run:
        print(f"prune done: {s['deleted']} objects deleted, {s['shares_deleted']} shares, "
              f"{human_bytes(s['bytes_freed'])} freed on the nodes; {s['pending']} pending; "
              f"{s['repacked_members']} members of {s['repacked_bundles']} bundles repacked")
    return EXIT_SKIPPED if s["failed"] else EXIT_OK


@defer.inlineCallbacks
def tag(ctx, args):
    protect = True if args.protect else (False if args.unprotect else None)
    if protect is None and not args.add and not args.remove:
        raise UserError("say what to change: --add T, --remove T, --protect or --unprotect")
    try:
        records = yield forgetting.tag(ctx, args.snapshots, args.add, args.remove, protect)
    except FludError as err:
        raise UserError(str(err))
    for r in records:
        state = "protected" if r.protected else "not protected"
        print(f"snapshot {r.snapshot_id}: tags [{', '.join(r.tags)}], {state}")
    return EXIT_OK
