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
