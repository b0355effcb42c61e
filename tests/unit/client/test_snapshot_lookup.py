"""Choosing a snapshot by number opens about log2(kept) records, not every
kept one (repository/snapshot_lookup.py `numbered`)."""
from types import SimpleNamespace

from twisted.internet import defer

from flud.client.repository.blobs import BlobDamaged
from flud.client.repository.snapshot_lookup import numbered


class Records:
    """A repository of kept snapshot records (numbers by blob id)."""

    def __init__(self, numbers, damaged=()):
        self.index = SimpleNamespace(snapshots=[f"blob{n}" for n in numbers])
        self.numbers = {f"blob{n}": n for n in numbers}
        self.damaged = {f"blob{n}" for n in damaged}
        self.opened = []

    def snapshot(self, blob_id):
        self.opened.append(blob_id)
        if blob_id in self.damaged:
            return defer.fail(BlobDamaged("damaged"))
        return defer.succeed(SimpleNamespace(snapshot_id=self.numbers[blob_id]))


def found(repo, number):
    result = []
    numbered(repo, number).addCallback(result.append)
    return result[0]


def test_a_number_among_a_thousand_kept_opens_a_dozen_records():
    numbers = [n for n in range(1, 3000) if n % 3]   # 1998 kept, gaps where forget was
    for wanted in (1, 2, 1000, 2999 - 1, 1501):
        repo = Records(numbers)
        blob_id, record = found(repo, wanted)
        assert (blob_id, record.snapshot_id) == (f"blob{wanted}", wanted)
        assert len(repo.opened) <= 11


def test_a_number_not_kept_is_none_after_reading_every_record():
    repo = Records([1, 2, 4, 5])
    assert found(repo, 3) is None
    assert sorted(repo.opened) == sorted(repo.index.snapshots)   # each once


def test_a_list_out_of_order_or_a_damaged_record_still_finds_the_snapshot():
    assert found(Records([5, 1, 9, 3, 7]), 1)[1].snapshot_id == 1
    repo = Records(list(range(1, 64)), damaged=[32])
    assert found(repo, 40)[0] == "blob40"
