"""A first backup writes the client index a batch at a time (issue 27): its
first walk (files to send, directories seen) and its tree (directories
built, records for the record cache) once cost a transaction or two per
directory each, and a commit cost more than the directory's rows."""
import os
import random

from flud.client.repository.record_cache import RecordCache
from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup


def _many_dirs(root, rng, dirs=120):
    for d in range(dirs):
        sub = os.path.join(root, f"d{d // 12:02}", f"e{d:03}")
        os.makedirs(sub)
        for f in range(2):
            with open(os.path.join(sub, f"f{f}"), "wb") as out:
                out.write(rng.randbytes(rng.randrange(1, 600)))


class _Transactions:
    """Counts the write transactions a connection makes: each COMMIT of an
    explicit one, and each write statement run outside one (autocommit)."""

    def __init__(self):
        self.count = 0
        self._open = False

    def __call__(self, statement):
        word = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
        if word == "BEGIN":
            self._open = True
        elif word in ("COMMIT", "END"):
            self._open = False
            self.count += 1
        elif word == "ROLLBACK":
            self._open = False
        elif word in ("INSERT", "REPLACE", "UPDATE", "DELETE") and not self._open:
            self.count += 1


def test_a_first_backup_commits_a_batch_at_a_time(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    _many_dirs(src, random.Random(9))
    index_writes, cache_writes = _Transactions(), _Transactions()
    world[1].index.db.set_trace_callback(index_writes)
    opened = RecordCache._open

    def traced(self):
        db = opened(self)
        db.set_trace_callback(cache_writes)
        return db
    monkeypatch.setattr(RecordCache, "_open", traced)
    summary, _, _ = run_backup(world, [src])
    assert summary["new"] == 240 and summary["skipped"] == 0
    dirs = 120 + 10 + 1
    # before: ~2 per directory in the walk, 1 per directory built, besides
    # the files' own; now a few batches, and the files' rows as they land
    assert index_writes.count < dirs // 2, index_writes.count
    assert cache_writes.count < 10, cache_writes.count   # was one per directory
