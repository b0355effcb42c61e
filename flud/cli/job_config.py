"""Typed configuration of the client's commands, built once from the
command line (as NodeConfig is for the node): the job runners in
cli/jobs.py read these records, not the argparse Namespace, so an option a
command does not have is a default here, not a getattr scattered in a job.
"""
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class RunConfig:
    """What every job that talks to the nodes takes from its command line.
    memory_budget: bytes (None: the default, flud.memory.DEFAULT_BUDGET);
    upload_limit, download_limit: bytes/s (0: none); limit_schedule: the
    --limit-schedule text; lock_held: the caller holds the home's job lock
    (--stdin-from-command)."""
    as_json: bool = False
    memory_budget: Optional[int] = None
    upload_limit: int = 0
    download_limit: int = 0
    limit_schedule: Optional[str] = None
    memory_log: Optional[str] = None
    lock_held: bool = False

    @classmethod
    def from_args(cls, args) -> "RunConfig":
        given = vars(args)
        return cls(as_json=bool(given.get("json", False)),
                   memory_budget=given.get("memory_budget") or None,
                   upload_limit=given.get("limit_upload") or 0,
                   download_limit=given.get("limit_download") or 0,
                   limit_schedule=given.get("limit_schedule"),
                   memory_log=given.get("memory_log") or None,
                   lock_held=bool(given.get("lock_held", False)))

    def budget_bytes(self) -> int:
        from flud.memory import DEFAULT_BUDGET
        return self.memory_budget or DEFAULT_BUDGET


@dataclass(frozen=True)
class RestoreConfig:
    """`flud restore`'s options: into `to`, the `paths` of snapshot
    `snapshot` (None: the newest), as --overwrite, --include/--exclude,
    --dry-run, --delete and --numeric-ids say."""
    to: str
    paths: Tuple[str, ...] = ()
    snapshot: Optional[str] = None
    overwrite: str = "never"
    include: Tuple[str, ...] = ()
    exclude: Tuple[str, ...] = ()
    dry_run: bool = False
    delete: bool = False
    numeric_ids: bool = False

    @classmethod
    def from_args(cls, args) -> "RestoreConfig":
        given = vars(args)
        return cls(to=given["to"], paths=tuple(given.get("paths") or ()),
                   snapshot=given.get("snapshot"),
                   overwrite=given.get("overwrite") or "never",
                   include=tuple(given.get("include") or ()),
                   exclude=tuple(given.get("exclude") or ()),
                   dry_run=bool(given.get("dry_run", False)),
                   delete=bool(given.get("delete", False)),
                   numeric_ids=bool(given.get("numeric_ids", False)))

    @property
    def steer(self) -> dict:
        """What the restore jobs take as keyword arguments (overwrite=...)."""
        return {"overwrite": self.overwrite}


def _given(args) -> dict:
    """The options a command line gave (a caller's Namespace may hold only
    some: what it lacks is the default of the record built from it)."""
    return vars(args)


@dataclass(frozen=True)
class BackupConfig:
    """`flud backup`'s options: the `paths` to back up, the snapshot's
    `tags`, how many files to read at once (None: the default), what to
    leave out (a backup.source_excludes.ExcludeOptions) and, with
    --stdin-from-command, the command whose output is the one file backed
    up (a backup.command_stream source, made by cli/backup_modes.py)."""
    paths: Tuple[str, ...] = ()
    tags: Tuple[str, ...] = ()
    parallel_files: Optional[int] = None
    excludes: object = None
    stream: object = None

    @classmethod
    def from_args(cls, args) -> "BackupConfig":
        from flud.cli.backup_flags import exclude_options

        given = _given(args)
        return cls(paths=tuple(given.get("paths") or ()), tags=tuple(given.get("tag") or ()),
                   parallel_files=given.get("parallel_files"),
                   excludes=exclude_options(args), stream=given.get("stream_source"))


@dataclass(frozen=True)
class VerifyConfig:
    """`flud verify`'s options: the snapshot (None: the newest), the
    fraction of its shares to challenge, and --full (every challenge kind
    at once, outside the rounds' rotation)."""
    snapshot: Optional[int] = None
    sample: float = 1.0
    full: bool = False

    @classmethod
    def from_args(cls, args) -> "VerifyConfig":
        given = _given(args)
        sample = given.get("sample")
        return cls(snapshot=given.get("snapshot"), sample=1.0 if sample is None else sample,
                   full=bool(given.get("full", False)))


def _seconds(text, flag: str) -> float:
    from flud import units
    from flud.cli.exits import UserError

    try:
        return units.parse_seconds(text)
    except units.UnitError as err:
        raise UserError(f"{flag}: {err}")


@dataclass(frozen=True)
class PruneConfig:
    """`flud prune`'s options (and `flud forget --prune`'s): delete only
    what was found unreferenced `grace` seconds ago, repack a bundle more
    than `max_unused` percent dead; `dry_run`: say, change nothing."""
    grace: float = 24 * 3600.0
    max_unused: int = 50
    dry_run: bool = False

    @classmethod
    def from_args(cls, args) -> "PruneConfig":
        given = _given(args)
        grace = given.get("grace")
        max_unused = given.get("max_unused")
        return cls(grace=cls.grace if grace is None else _seconds(grace, "--grace"),
                   max_unused=cls.max_unused if max_unused is None else max_unused,
                   dry_run=bool(given.get("dry_run", False)))


@dataclass(frozen=True)
class ForgetConfig:
    """`flud forget`'s options: the retention policy (a prune.retention
    Policy: the --keep-* rules and the snapshots named), `dry_run`, and
    `prune`: the prune to run afterwards (None: none)."""
    policy: object
    dry_run: bool = False
    prune: Optional[PruneConfig] = None

    @classmethod
    def from_args(cls, args) -> "ForgetConfig":
        given = _given(args)
        prune = PruneConfig.from_args(args) if given.get("prune") else None
        return cls(policy=_policy(given), dry_run=bool(given.get("dry_run", False)),
                   prune=prune)


def _policy(given: dict):
    """The retention Policy of a `flud forget` command line (UserError
    when it is wrong, or says nothing to keep or forget)."""
    from flud.cli.exits import UserError
    from flud.client.prune.retention import (Policy, RetentionError, check_policy,
                                             parse_duration)

    try:
        within = given.get("keep_within")
        policy = Policy(last=given.get("keep_last") or 0,
                        hourly=given.get("keep_hourly") or 0,
                        daily=given.get("keep_daily") or 0,
                        weekly=given.get("keep_weekly") or 0,
                        monthly=given.get("keep_monthly") or 0,
                        yearly=given.get("keep_yearly") or 0,
                        within=parse_duration(within) if within else None,
                        tags=tuple(given.get("keep_tag") or ()),
                        forget=tuple(str(i) for i in given.get("snapshots") or ()))
        check_policy(policy)
    except RetentionError as err:
        raise UserError(str(err))
    if not policy.has_rules and not policy.forget:
        raise UserError("say what to keep (--keep-last, --keep-daily, ... --keep-within, "
                        "--keep-tag) or which snapshots to forget")
    return policy


@dataclass(frozen=True)
class TagConfig:
    """`flud tag`'s options: the snapshots, the tags to add and remove, and
    their protection (True/False; None: unchanged)."""
    snapshots: Tuple[int, ...] = ()
    add: Tuple[str, ...] = ()
    remove: Tuple[str, ...] = ()
    protect: Optional[bool] = None

    @classmethod
    def from_args(cls, args) -> "TagConfig":
        from flud.cli.exits import UserError

        given = _given(args)
        protect = True if given.get("protect") else (False if given.get("unprotect") else None)
        config = cls(snapshots=tuple(given.get("snapshots") or ()),
                     add=tuple(given.get("add") or ()), remove=tuple(given.get("remove") or ()),
                     protect=protect)
        if protect is None and not config.add and not config.remove:
            raise UserError("say what to change: --add T, --remove T, --protect or --unprotect")
        return config


@dataclass(frozen=True)
class CheckConfig:
    """`flud check`'s options: the part of the shares to challenge (a
    repair.rotation subset; None: this run's turn), how long a node may be
    away before its shares count as gone (seconds), --repair, the repair
    threshold m (None: the home's) and the safety margin (None: the
    default). m and the margin are checked against k and n by the job."""
    subset: object = None
    unreachable_grace: float = 3 * 24 * 3600.0
    repair: bool = False
    repair_below: Optional[int] = None
    safety_margin: Optional[int] = None

    @classmethod
    def from_args(cls, args) -> "CheckConfig":
        from flud.cli.exits import UserError
        from flud.client.repair.rotation import BadDataSubset, parse_subset

        given = _given(args)
        text = given.get("read_data_subset")
        try:
            subset = parse_subset(text) if text else None
        except BadDataSubset as err:
            raise UserError(str(err))
        grace = given.get("unreachable_grace")
        return cls(subset=subset,
                   unreachable_grace=(cls.unreachable_grace if grace is None
                                      else _seconds(grace, "--unreachable-grace")),
                   repair=bool(given.get("repair", False)),
                   repair_below=given.get("repair_below"),
                   safety_margin=given.get("safety_margin"))


@dataclass(frozen=True)
class BrowseConfig:
    """`flud ls`, `find`, `diff` and `stats`: the snapshot (None: the
    newest for ls, every one for find and stats), ls's path and --dir,
    find's pattern, diff's two snapshots, and --json (ls lists entries)."""
    snapshot: Optional[int] = None
    path: Optional[str] = None
    dir: Optional[str] = None
    pattern: Optional[str] = None
    old: Optional[int] = None
    new: Optional[int] = None
    as_json: bool = False

    @classmethod
    def from_args(cls, args) -> "BrowseConfig":
        given = _given(args)
        return cls(snapshot=given.get("snapshot"), path=given.get("path"),
                   dir=given.get("dir"), pattern=given.get("pattern"), old=given.get("old"),
                   new=given.get("new"), as_json=bool(given.get("json", False)))


@dataclass(frozen=True)
class DumpConfig:
    """`flud dump`'s options: the path in the snapshot (None: the newest)."""
    path: str
    snapshot: Optional[int] = None

    @classmethod
    def from_args(cls, args) -> "DumpConfig":
        given = _given(args)
        return cls(path=given["path"], snapshot=given.get("snapshot"))


@dataclass(frozen=True)
class AdoptConfig:
    """`flud adopt`'s option: --accept-older (adopt a head older than one
    this home wrote)."""
    accept_older: bool = False

    @classmethod
    def from_args(cls, args) -> "AdoptConfig":
        return cls(accept_older=bool(_given(args).get("accept_older", False)))
