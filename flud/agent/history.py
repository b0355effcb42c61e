"""The agent's record of runs: agent-history.jsonl in the home.

One JSON object a line, appended with a single write and fsynced: a crash
leaves at most a torn last line, which the reader skips. Bounded by
rotation: once the file holds more than twice the kept lines, it is
rewritten (to a temporary file, then renamed over) with the last `keep`
runs of each job. The time series of the status page (bytes stored,
health) are read off the same records.
"""
import json
import os

HISTORY_NAME = "agent-history.jsonl"
# A line longer than this is cut to its essentials: a summary is small, and
# the file must stay bounded whatever a job printed.
MAX_LINE = 64 * 1024
# A summary's lists (a check's troubled objects, moved shares) are kept to
# this many items, their full length beside them: the counts are what the
# page reads, and a list must not push a record past MAX_LINE.
LIST_KEEP = 100


class History:
    def __init__(self, home: str, keep: int = 100):
        self.path = os.path.join(home, HISTORY_NAME)
        self.keep = keep
        self._lines = None  # how many lines the file holds (counted once)
        self._jobs = set()  # the jobs it has records of
        self._cached = (None, [])  # (file identity, records) of the last read

    def read(self) -> list:
        """Every whole record, oldest first (a torn or foreign line is
        skipped). Parsed again only when the file changed: the status page
        asks every few seconds."""
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                if stamp == self._cached[0]:
                    return list(self._cached[1])
                raw = f.read()
        except FileNotFoundError:
            return []
        records = self._parse(raw)
        self._cached = (stamp, records)
        return list(records)

    @staticmethod
    def _parse(raw: bytes) -> list:
        records = []
        for line in raw.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "job" in record:
                records.append(record)
        return records

    def append(self, record: dict) -> None:
        if isinstance(record.get("summary"), dict):
            record = {**record, "summary": compact(record["summary"])}
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        if len(line) >= MAX_LINE:
            keep = {k: record[k] for k in ("job", "start", "end", "exit", "error") if k in record}
            line = json.dumps({**keep, "summary": None, "truncated": True})
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size:
                # a torn line before ours (a crash mid-write) must not swallow ours
                line = "\n" + line if not _ends_with_newline(fd) else line
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if self._lines is None:
            records = self.read()
            self._lines, self._jobs = len(records), {r["job"] for r in records}
        else:
            self._lines += 1
            self._jobs.add(record["job"])
        if self._lines > 2 * self.keep * len(self._jobs):
            self.rotate()

    def rotate(self) -> None:
        """Keep the last `keep` records of each job (crash-safe: rename)."""
        records = self.read()
        per_job = {}
        for record in records:
            per_job.setdefault(record["job"], []).append(record)
        kept_ids = {id(r) for runs in per_job.values() for r in runs[-self.keep:]}
        kept = [r for r in records if id(r) in kept_ids]
        temp = self.path + ".tmp"
        with open(temp, "w") as f:
            for record in kept:
                f.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
        self._lines = len(kept)

    def last_starts(self) -> dict:
        """job -> when its newest recorded run started."""
        out = {}
        for record in self.read():
            if isinstance(record.get("start"), (int, float)):
                out[record["job"]] = record["start"]
        return out


def compact(summary: dict) -> dict:
    """The summary with every list (at the top or one level down) cut to
    LIST_KEEP items; a cut list's length goes beside it as KEY_count."""
    out = {}
    for key, value in summary.items():
        if isinstance(value, list) and len(value) > LIST_KEEP:
            out[key], out[key + "_count"] = value[:LIST_KEEP], len(value)
        elif isinstance(value, dict) and any(isinstance(v, list) and len(v) > LIST_KEEP
                                             for v in value.values()):
            out[key] = compact(value)
        else:
            out[key] = value
    return out


def _ends_with_newline(fd) -> bool:
    size = os.fstat(fd).st_size
    return not size or os.pread(fd, 1, size - 1) == b"\n"
