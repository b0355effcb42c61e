"""Result records of the client's commands: what a run did, typed. The
--json summary (docs/json.md) carries their fields, the human summary lines
are made from them, and the benchmarks (tools/bench/common.py) read them
back from a summary line instead of parsing the text.
"""
from dataclasses import asdict, dataclass, fields

from flud.client.progress import human_bytes


@dataclass(frozen=True)
class BackupResult:
    """A backup: snapshot number, the files in it and what became of them,
    what was read and sent (bytes_known: of large files, in chunks stored
    before, not sent again), in how many STOREs and tars, in how long."""
    snapshot: int
    files: int
    new: int
    changed: int
    unchanged: int
    skipped: int
    dedup: int
    excluded: int
    bytes_read: int
    bytes_sent: int
    stores: int
    tars: int
    elapsed: float
    bytes_known: int = 0
    reduced_redundancy: int = 0

    @classmethod
    def from_summary(cls, summary: dict) -> "BackupResult":
        """From the job's summary, or a --json summary line read back."""
        return cls(**{f.name: summary.get(f.name, 0) for f in fields(cls)})

    def to_json(self) -> dict:
        return asdict(self)

    def text_lines(self, n: int) -> list:
        """The human summary (n: the home's shares per object)."""
        rate = self.bytes_read / self.elapsed if self.elapsed else 0
        lines = [f"snapshot {self.snapshot}: {self.files} files ({self.new} new, "
                 f"{self.changed} changed, {self.unchanged} unchanged, {self.skipped} skipped, "
                 f"{self.dedup} deduplicated, {self.excluded} excluded)",
                 f"read {human_bytes(self.bytes_read)}, sent {human_bytes(self.bytes_sent)} in "
                 f"{self.stores} STOREs ({self.tars} tars), {self.elapsed:.2f} s, "
                 f"{human_bytes(rate)}/s"]
        if self.bytes_known:
            lines.append(f"large files: {human_bytes(self.bytes_known)} in chunks already "
                         f"stored, not sent again")
        if self.reduced_redundancy:
            lines.append(f"reduced redundancy: {self.reduced_redundancy} bundles have fewer "
                         f"than n={n} distinct holders (too few nodes were up); "
                         f"`flud check --repair` spreads them out once more nodes are up")
        return lines


@dataclass(frozen=True)
class RestoreResult:
    """A restore: the snapshot, what it wrote, in how long, and its
    RETRIEVEs (retrieves: for file data; record_retrieves: for the
    snapshot's own records: root, map, trees)."""
    snapshot: int
    files: int
    dirs: int
    symlinks: int
    bytes: int
    elapsed: float
    retrieves: int
    record_retrieves: int = 0

    @classmethod
    def from_summary(cls, summary: dict) -> "RestoreResult":
        """From the job's summary, or a --json summary line read back."""
        return cls(**{f.name: summary.get(f.name, 0) for f in fields(cls)})

    def to_json(self) -> dict:
        return asdict(self)

    def text_line(self, dest: str) -> str:
        rate = self.bytes / self.elapsed if self.elapsed else 0
        return (f"restored snapshot {self.snapshot} to {dest}: {self.files} files, "
                f"{self.dirs} dirs, {self.symlinks} symlinks, {human_bytes(self.bytes)} in "
                f"{self.elapsed:.2f} s ({human_bytes(rate)}/s), "
                f"{self.retrieves + self.record_retrieves} RETRIEVEs "
                f"({self.record_retrieves} of them for the snapshot's records)")


@dataclass(frozen=True)
class MemoryResult:
    """The memory a run used (MemoryMonitor.snapshot(), the summary's `memory`)."""
    peak_transfer_bytes: int = 0
    peak_rss: int = 0
    static_rss: int = 0

    @classmethod
    def from_summary(cls, summary: dict) -> "MemoryResult":
        memory = summary.get("memory") or {}
        return cls(**{f.name: memory.get(f.name, 0) for f in fields(cls)})


@dataclass(frozen=True)
class VerifyResult:
    """A verify round: the snapshot, the round (full: every challenge kind
    at once), the outcome counts in total and per node (node hex -> counts),
    the records that could not be read (unreadable; damaged: their first
    paths and why), the bad shares (their first ones), the objects with
    fewer than k shares confirmed, and why the snapshot may not be the
    newest (root_unconfirmed: '' when it is)."""
    snapshot: int
    full: bool
    round: int
    totals: dict
    nodes: dict
    unreadable: int = 0
    damaged: list = ()
    bad: list = ()
    short_of_k: int = 0
    root_unconfirmed: str = ""

    @classmethod
    def from_summary(cls, summary: dict) -> "VerifyResult":
        defaults = {f.name: f.default for f in fields(cls)}
        return cls(**{name: summary.get(name, default) for name, default in defaults.items()})

    def to_json(self) -> dict:
        record = asdict(self)
        record["damaged"], record["bad"] = list(self.damaged), list(self.bad)
        if not self.root_unconfirmed:
            del record["root_unconfirmed"]
        return record


@dataclass(frozen=True)
class PruneResult:
    """A prune: what the kept snapshots reach (live_bytes in bundles of
    reached_bundle_bytes, live_extent_bytes in extents; mostly_dead_bundles
    to repack), what was marked, deleted (objects, shares, bytes freed on
    the nodes), repacked and left pending or failed."""
    snapshots: int = 0
    objects: int = 0
    reached: int = 0
    records_read: int = 0
    live_bytes: int = 0
    reached_bundle_bytes: int = 0
    live_extent_bytes: int = 0
    mostly_dead_bundles: int = 0
    marked: int = 0
    waiting: int = 0
    deleted: int = 0
    failed: int = 0
    pending: int = 0
    cancelled: int = 0
    shares_deleted: int = 0
    bytes_freed: int = 0
    surplus: int = 0
    surplus_deleted: int = 0
    repacked_bundles: int = 0
    repacked_members: int = 0

    @classmethod
    def from_summary(cls, summary: dict) -> "PruneResult":
        """From the job's summary, or a --json summary's `prune` read back."""
        return cls(**{f.name: summary.get(f.name, 0) for f in fields(cls)})

    def to_json(self) -> dict:
        return asdict(self)

    def text_line(self) -> str:
        return (f"prune done: {self.deleted} objects deleted, {self.shares_deleted} shares, "
                f"{human_bytes(self.bytes_freed)} freed on the nodes; {self.pending} pending; "
                f"{self.repacked_members} members of {self.repacked_bundles} bundles repacked")


@dataclass(frozen=True)
class CheckResult:
    """A check: the objects' counts by health class (and repaired), the
    part of the cycle challenged, shares challenged and downloaded, what
    repair re-created and fetched, the objects not healthy, each node's
    tally, the shares moved and the surplus copies, and why the head checked
    may not be the newest (unconfirmed: '' when it is)."""
    counts: dict
    window: float = 0.0
    challenged: int = 0
    downloaded: int = 0
    recreated: dict = None
    fetched_bytes: int = 0
    objects: list = ()
    nodes: list = ()
    moved: dict = None
    surplus: list = ()
    unconfirmed: str = ""

    @classmethod
    def from_summary(cls, summary: dict) -> "CheckResult":
        """From the job's report.summary(), or a --json summary read back."""
        defaults = {f.name: f.default for f in fields(cls)}
        record = cls(**{name: summary.get(name, default) for name, default in defaults.items()})
        return record

    def to_json(self) -> dict:
        record = asdict(self)
        record.update(recreated=dict(self.recreated or {"shares": 0, "bytes": 0}),
                      moved=dict(self.moved or {}), objects=list(self.objects),
                      nodes=list(self.nodes), surplus=list(self.surplus))
        if not self.unconfirmed:
            del record["unconfirmed"]
        return record
