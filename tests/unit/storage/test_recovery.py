"""Crash recovery of the disk ShareStore: torn appends, leftovers, interrupted compactions."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from flud.storage.archives import COMPACTION_STEPS, STEP_INDEXED, STEP_RENAMED, STEP_SYNCED
from flud.storage.disk import ShareStore
from flud.storage.errors import NotFound
from flud.storage.index import Index
from flud.storage.tarscan import member_span

from .helpers import ALICE, BOB, CAPACITY, SimulatedCrash, crash, key_of, put_tar, read_all


def archive_path(root: Path, owner: bytes) -> Path:
    return root / "archives" / f"{owner.hex()}.tar"


def test_torn_tail_is_cut_at_open(tmp_path):
    store = ShareStore(tmp_path, CAPACITY)
    datas = [os.urandom(n) for n in (1000, 2000)]
    put_tar(store, ALICE, datas)
    store.close()
    path = archive_path(tmp_path, ALICE)
    committed = path.read_bytes()
    with open(path, "ab") as f:  # half an append that never committed
        f.write(os.urandom(3000))
    store = ShareStore(tmp_path, CAPACITY)
    assert path.read_bytes() == committed
    for data in datas:
        assert read_all(store, key_of(data), ALICE) == data
    more = os.urandom(700)
    put_tar(store, ALICE, [more])
    assert read_all(store, key_of(more), ALICE) == more
    assert path.read_bytes().startswith(committed)
    assert store.stats()["bytes_stored"] == path.stat().st_size
    store.close()


def test_append_cuts_a_leftover_tail_first(tmp_path):
    store = ShareStore(tmp_path, CAPACITY, fsync=False)
    first = os.urandom(1000)
    put_tar(store, ALICE, [first])
    with open(archive_path(tmp_path, ALICE), "ab") as f:
        f.write(b"junk" * 100)
    second = os.urandom(1000)
    put_tar(store, ALICE, [second])
    names = [m.name for m in tarfile.open(archive_path(tmp_path, ALICE)).getmembers()]
    assert names == [key_of(first).hex(), key_of(second).hex()]
    assert read_all(store, key_of(second), ALICE) == second
    store.close()


def test_incoming_is_emptied_and_reservations_forgotten(tmp_path):
    store = ShareStore(tmp_path, CAPACITY)
    data = os.urandom(5000)
    upload = store.open_upload(key_of(data), ALICE, len(data))
    upload.write(data[:2000])
    assert len(os.listdir(tmp_path / "incoming")) == 1
    crash(store)
    store = ShareStore(tmp_path, CAPACITY)
    assert os.listdir(tmp_path / "incoming") == []
    assert store.stats()["free"] == CAPACITY
    assert store.owners(key_of(data)) == set()
    store.close()


def test_crash_after_append_before_index_commit(tmp_path, monkeypatch):
    store = ShareStore(tmp_path, CAPACITY)
    old = os.urandom(1500)
    put_tar(store, ALICE, [old])
    committed = archive_path(tmp_path, ALICE).read_bytes()

    def die(*args):
        raise SimulatedCrash("after the archive append")

    monkeypatch.setattr(Index, "add_members", die)
    new = os.urandom(4000)
    with pytest.raises(SimulatedCrash):
        put_tar(store, ALICE, [new])
    assert archive_path(tmp_path, ALICE).stat().st_size > len(committed)
    crash(store)
    monkeypatch.undo()
    store = ShareStore(tmp_path, CAPACITY)
    assert archive_path(tmp_path, ALICE).read_bytes() == committed
    assert store.owners(key_of(new)) == set()
    assert read_all(store, key_of(old), ALICE) == old
    store.close()


def test_first_archive_that_never_committed_is_removed(tmp_path, monkeypatch):
    store = ShareStore(tmp_path, CAPACITY)
    monkeypatch.setattr(Index, "add_members", lambda *a: (_ for _ in ()).throw(SimulatedCrash()))
    with pytest.raises(SimulatedCrash):
        put_tar(store, ALICE, [b"lost"])
    crash(store)
    monkeypatch.undo()
    store = ShareStore(tmp_path, CAPACITY)
    assert not archive_path(tmp_path, ALICE).exists()
    assert store.stats()["archives"] == 0 and store.stats()["bytes_stored"] == 0
    store.close()


def test_share_file_whose_unlink_was_interrupted_goes_at_open(tmp_path, monkeypatch):
    store = ShareStore(tmp_path, CAPACITY)
    data = os.urandom(3000)
    store.put(key_of(data), ALICE, data)
    path = store._layout.share_path(key_of(data))

    def die(target, *args, **kw):
        raise SimulatedCrash("before the unlink")

    monkeypatch.setattr("flud.storage.disk.os.unlink", die)
    with pytest.raises(SimulatedCrash):
        store.delete(key_of(data), ALICE)
    monkeypatch.undo()
    crash(store)
    assert os.path.exists(path)
    store = ShareStore(tmp_path, CAPACITY)
    assert not os.path.exists(path)
    assert store.stats()["bytes_stored"] == 0 and store.owners(key_of(data)) == set()
    store.close()


def _setup_compaction(root: Path, hook=None):
    store = ShareStore(root, CAPACITY, fault_hook=hook)
    first = [os.urandom(n) for n in (3000, 100, 5000, 700)]
    second = [os.urandom(n) for n in (2500, 1)]
    put_tar(store, ALICE, first)
    put_tar(store, ALICE, second)
    put_tar(store, BOB, [first[0]])
    dead = [first[1], first[3], second[0]]  # leaves several separate runs to copy
    for data in dead:
        store.delete(key_of(data), ALICE)
    live = [d for d in first + second if d not in dead]
    return store, live, dead


@pytest.mark.parametrize("step", COMPACTION_STEPS)
def test_crash_at_each_compaction_step_loses_no_live_member(tmp_path, step):
    def hook(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    store, live, dead = _setup_compaction(tmp_path, hook)
    garbage = store.stats()["garbage_bytes"]
    length_before = archive_path(tmp_path, ALICE).stat().st_size
    with pytest.raises(SimulatedCrash):
        store.compact(ALICE)
    compact_file = tmp_path / "archives" / f"{ALICE.hex()}.tar.compact"
    renamed = COMPACTION_STEPS.index(step) >= COMPACTION_STEPS.index(STEP_RENAMED)
    assert compact_file.exists() != renamed  # the crash left the state this step implies
    crash(store)

    store = ShareStore(tmp_path, CAPACITY)
    committed = COMPACTION_STEPS.index(step) >= COMPACTION_STEPS.index(STEP_INDEXED)
    for data in live:
        assert read_all(store, key_of(data), ALICE) == data
    for data in dead:
        with pytest.raises(NotFound):
            store.size(key_of(data), ALICE)
    assert read_all(store, key_of(live[0]), BOB) == live[0]
    assert not list((tmp_path / "archives").glob("*.compact"))
    assert store._index.pending_compactions() == []
    path = archive_path(tmp_path, ALICE)
    names = [m.name for m in tarfile.open(path).getmembers()]
    if committed:
        assert names == [key_of(d).hex() for d in live]
        assert path.stat().st_size == length_before - garbage
        assert store.stats()["garbage_bytes"] == 0
    else:
        assert path.stat().st_size == length_before
        assert store.stats()["garbage_bytes"] == garbage
    on_disk = path.stat().st_size + archive_path(tmp_path, BOB).stat().st_size
    assert store.stats()["bytes_stored"] == on_disk
    # the store carries on: compaction and appends work
    store.compact(ALICE)
    assert [m.name for m in tarfile.open(path).getmembers()] == [key_of(d).hex() for d in live]
    more = os.urandom(999)
    put_tar(store, ALICE, [more])
    for data in live + [more]:
        assert read_all(store, key_of(data), ALICE) == data
    store.close()


@pytest.mark.parametrize("step", [STEP_RENAMED, STEP_SYNCED])
def test_crash_after_the_rename_does_not_rename_twice(tmp_path, step):
    """Open must see that the rename happened (no .compact) and only clear the record."""

    def hook(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    store, live, _ = _setup_compaction(tmp_path, hook)
    with pytest.raises(SimulatedCrash):
        store.compact(ALICE)
    assert not (tmp_path / "archives" / f"{ALICE.hex()}.tar.compact").exists()
    crash(store)
    store = ShareStore(tmp_path, CAPACITY)
    for data in live:
        assert read_all(store, key_of(data), ALICE) == data
    store.close()


def test_delete_while_compaction_copies(tmp_path):
    """A member deleted between the copy and the index swap ends up garbage, not live."""
    victim = []

    def hook(at: str) -> None:
        if at == COMPACTION_STEPS[1] and victim:  # copied, index not yet swapped
            store.delete(key_of(victim.pop()), ALICE)

    store, live, _ = _setup_compaction(tmp_path, hook)
    victim.append(live[1])
    store.compact(ALICE)
    with pytest.raises(NotFound):
        store.size(key_of(live[1]), ALICE)
    assert store.stats()["garbage_bytes"] == member_span(len(live[1]))
    for data in live[:1] + live[2:]:
        assert read_all(store, key_of(data), ALICE) == data
    store.compact(ALICE)
    assert store.stats()["garbage_bytes"] == 0
    names = [m.name for m in tarfile.open(archive_path(tmp_path, ALICE)).getmembers()]
    assert names == [key_of(d).hex() for d in live[:1] + live[2:]]
    store.close()


def test_tar_bytes_are_a_valid_tar_after_everything(tmp_path):
    store, live, _ = _setup_compaction(tmp_path)
    store.compact(ALICE)
    data = archive_path(tmp_path, ALICE).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member, expected in zip(tar.getmembers(), live):
            assert tar.extractfile(member).read() == expected
    store.close()
