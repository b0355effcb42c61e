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
