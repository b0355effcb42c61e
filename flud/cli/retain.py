"""`flud forget`, `flud prune` and `flud tag`: what the repository keeps,
and giving back what nothing kept needs (flud/client/prune/)."""
import datetime

from twisted.internet import defer

from flud.cli.exits import EXIT_OK, EXIT_SKIPPED, UserError
from flud.cli.job_config import ForgetConfig, PruneConfig, TagConfig
from flud.cli.results import PruneResult
from flud.client.prune import forget as forgetting
from flud.client.prune.prune_job import Prune
from flud.errors import FludError


def _local_tz():
    return datetime.datetime.now().astimezone().tzinfo


def _summary(args) -> dict:
    """Where the command's --json summary is gathered (cli/jobs.py prints it)."""
    return vars(args).setdefault("summary", {})


@defer.inlineCallbacks
def forget(ctx, args):
    config = ForgetConfig.from_args(args)
    try:
        kept, removed, _ = yield forgetting.forget(ctx, config.policy, config.dry_run,
                                                   _local_tz())
    except FludError as err:
        raise UserError(str(err))
    _summary(args).update(kept=kept, removed=removed, dry_run=config.dry_run)
    verb = "would remove" if config.dry_run else "removed"
    print(f"{kept} snapshot(s) kept, {removed} {verb}")
    if config.prune is not None and not config.dry_run:
        code = yield run_prune(ctx, config.prune, _summary(args))
        return code
    return EXIT_OK


def prune(ctx, args):
    return run_prune(ctx, PruneConfig.from_args(args), _summary(args))


@defer.inlineCallbacks
def run_prune(ctx, config: PruneConfig, summary: dict):
    """Prune as `config` says; its PruneResult goes to summary["prune"]."""
    job = Prune(ctx, grace=config.grace, max_unused=config.max_unused,
                dry_run=config.dry_run)
    try:
        s = yield job.run()
    except FludError as err:
        raise UserError(str(err))
    done = PruneResult.from_summary(s)
    summary["prune"] = done.to_json()
    if not config.dry_run:
        print(done.text_line())
    return EXIT_SKIPPED if done.failed else EXIT_OK


@defer.inlineCallbacks
def tag(ctx, args):
    config = TagConfig.from_args(args)
    try:
        records = yield forgetting.tag(ctx, list(config.snapshots), list(config.add),
                                       list(config.remove), config.protect)
    except FludError as err:
        raise UserError(str(err))
    for r in records:
        state = "protected" if r.protected else "not protected"
        print(f"snapshot {r.snapshot_id}: tags [{', '.join(r.tags)}], {state}")
    return EXIT_OK
