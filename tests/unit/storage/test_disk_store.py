"""Disk-only behaviour of ShareStore: full disk, format versions, layout, persistence, threads."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading

import pytest

from flud.storage.disk import ShareStore
from flud.storage.errors import FormatError, NoSpace, NotFound
from flud.storage.layout import Layout

from .helpers import ALICE, BOB, CAPACITY, key_of, put_tar, read_all, make_tar


@pytest.fixture
def store(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY)
    yield store
    store.close()


def _full_disk(monkeypatch, code: int) -> None:
    def write(fd, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_during_upload(store, monkeypatch, code):
    data = os.urandom(10_000)
    upload = store.open_upload(key_of(data), ALICE, len(data))
    upload.write(data[:4000])
    _full_disk(monkeypatch, code)
    with pytest.raises(NoSpace, match="disk is full"):
        upload.write(data[4000:])
    monkeypatch.undo()
    assert os.listdir(os.path.join(store.root, "incoming")) == []
    assert store.stats()["free"] == CAPACITY and store.owners(key_of(data)) == set()
    upload.abort()  # already aborted by the failure: a no-op
    store.put(key_of(data), ALICE, data)  # the store is still usable
    assert read_all(store, key_of(data), ALICE) == data


def test_full_disk_while_appending_an_archive(store, monkeypatch):
    old = os.urandom(3000)
    put_tar(store, ALICE, [old])
    archive = os.path.join(store.root, "archives", ALICE.hex() + ".tar")
    length = os.path.getsize(archive)
    new = [os.urandom(5000), os.urandom(70)]
    tar = make_tar(new)
    upload = store.open_upload(key_of(tar), ALICE, len(tar), kind="archive")
    upload.write(tar)  # lands in incoming/ fine
    real_write, calls = os.write, []

    def write_then_fill(fd, data):  # the first piece gets in, then the disk is full
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data[:100])

    monkeypatch.setattr(os, "write", write_then_fill)
    with pytest.raises(NoSpace):
        upload.commit()
    monkeypatch.undo()
    assert os.path.getsize(archive) == length
    assert os.listdir(os.path.join(store.root, "incoming")) == []
    assert store.keys(ALICE) == [key_of(old)]
    assert store.stats()["bytes_stored"] == length and store.stats()["free"] == CAPACITY - length
    put_tar(store, ALICE, new)
    for data in [old] + new:
        assert read_all(store, key_of(data), ALICE) == data


def test_full_disk_during_compaction_keeps_the_old_archive(store, monkeypatch):
    datas = [os.urandom(4000) for _ in range(3)]
    put_tar(store, ALICE, datas)
    store.delete(key_of(datas[0]), ALICE)
    _full_disk(monkeypatch, errno.ENOSPC)
    with pytest.raises(NoSpace):
        store.compact(ALICE)
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(store.root, "archives", ALICE.hex() + ".tar.compact"))
    for data in datas[1:]:
        assert read_all(store, key_of(data), ALICE) == data
    assert store.compact(ALICE) > 0


def test_a_new_store_writes_its_format(tmp_path):
    ShareStore(tmp_path, CAPACITY).close()
    assert (tmp_path / "FORMAT").read_text() == "flud-store 1\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["archives", "incoming", "shares"]


@pytest.mark.parametrize("content", ["flud-store 2\n", "something else\n", ""])
def test_unknown_format_is_refused(tmp_path, content):
    ShareStore(tmp_path, CAPACITY).close()
    (tmp_path / "FORMAT").write_text(content)
    with pytest.raises(FormatError, match="this flud reads only 'flud-store 1'"):
        ShareStore(tmp_path, CAPACITY)


def test_index_without_format_file_is_refused(tmp_path):
    ShareStore(tmp_path, CAPACITY).close()
    (tmp_path / "FORMAT").unlink()
    with pytest.raises(FormatError, match="no FORMAT file"):
        ShareStore(tmp_path, CAPACITY)


def test_newer_schema_is_refused(tmp_path):
    ShareStore(tmp_path, CAPACITY).close()
    db = sqlite3.connect(tmp_path / "index.sqlite")
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(FormatError, match="schema version 99"):
        ShareStore(tmp_path, CAPACITY)


def test_fan_out_layout(store):
    data = os.urandom(1234)
    key = key_of(data)
    store.put(key, ALICE, data)
    name = key.hex()
    path = os.path.join(store.root, "shares", name[:2], name)
    assert open(path, "rb").read() == data
    assert Layout(store.root).share_path(key) == path
    # all 256 fan-out directories exist from the start; only this one holds a file
    fan_out = sorted(os.listdir(os.path.join(store.root, "shares")))
    assert fan_out == [f"{i:02x}" for i in range(256)]
    assert [d for d in fan_out if os.listdir(os.path.join(store.root, "shares", d))] == [name[:2]]
    put_tar(store, BOB, [b"member"])
    assert os.listdir(os.path.join(store.root, "archives")) == [BOB.hex() + ".tar"]


def test_everything_persists_across_reopen(tmp_path):
    root = tmp_path / "store"
    store = ShareStore(root, CAPACITY)
    share = os.urandom(9000)
    store.put(key_of(share), ALICE, share)
    store.put(key_of(share), BOB, share)
    members = [os.urandom(n) for n in (100, 2000, 3000)]
    put_tar(store, ALICE, members)
    store.delete(key_of(members[0]), ALICE)
    before = store.stats()
    keys = {owner: store.keys(owner) for owner in (ALICE, BOB)}
    store.close()

    store = ShareStore(root, CAPACITY)
    assert store.stats() == before
    assert {owner: store.keys(owner) for owner in (ALICE, BOB)} == keys
    assert store.owners(key_of(share)) == {ALICE, BOB}
    assert read_all(store, key_of(share), BOB) == share
    for data in members[1:]:
        assert read_all(store, key_of(data), ALICE) == data
    with pytest.raises(NotFound):
        store.size(key_of(members[0]), ALICE)
    store.close()


def test_capacity_is_recomputed_at_open(tmp_path):
    store = ShareStore(tmp_path, 10_000)
    data = os.urandom(6000)
    store.put(key_of(data), ALICE, data)
    store.close()
    store = ShareStore(tmp_path, 10_000)
    with pytest.raises(NoSpace):
        store.put(key_of(b"x" * 5000), ALICE, b"x" * 5000)
    store.close()


def test_many_threads(tmp_path):
    """Uploads, reads, deletes and compactions from several threads stay consistent."""
    store = ShareStore(tmp_path, CAPACITY, fsync=False)
    owners = [bytes([i]) * 32 for i in range(6)]
    errors = []
    kept: dict[bytes, list[bytes]] = {}

    def work(owner: bytes) -> None:
        try:
            mine = []
            for round_ in range(5):
                batch = [os.urandom(200 + 50 * i) for i in range(6)]
                put_tar(store, owner, batch)
                shared = b"shared share %d" % round_  # every thread stores the same key
                store.put(key_of(shared), owner, shared)
                for data in batch[::2]:
                    store.delete(key_of(data), owner)
                mine += batch[1::2]
                store.compact(owner)
                for data in mine:
                    assert read_all(store, key_of(data), owner) == data
            kept[owner] = mine
        except BaseException as exc:  # reported below: an assert in a thread is silent
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for owner, mine in kept.items():
        for data in mine:
            assert read_all(store, key_of(data), owner) == data
        assert store.owners(key_of(b"shared share 0")) == set(owners)
    assert store.stats()["garbage_bytes"] == 0
    store.close()


def test_large_upload_starts_writeback_as_it_goes(tmp_path, monkeypatch):
    """A durable store hands every WRITEBACK_STEP bytes to the kernel while
    the upload streams in, so the fsync at commit has little left to do."""
    import flud.storage.disk as disk

    calls = []
    real = disk.start_writeback
    monkeypatch.setattr(disk, "start_writeback",
                        lambda fd, offset, length: (calls.append((offset, length)),
                                                    real(fd, offset, length)))
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=True)
    data = os.urandom(2 * disk.WRITEBACK_STEP + 12345)
    with store.open_upload(key_of(data), ALICE, len(data)) as upload:
        for start in range(0, len(data), 1 << 20):
            upload.write(data[start:start + (1 << 20)])
        upload.commit()
    step = disk.WRITEBACK_STEP
    assert calls == [(0, step), (step, step)]
    assert read_all(store, key_of(data), ALICE) == data
    store.close()


def test_no_writeback_when_the_store_is_not_durable(tmp_path, monkeypatch):
    import flud.storage.disk as disk

    calls = []
    monkeypatch.setattr(disk, "start_writeback", lambda *a: calls.append(a))
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    data = os.urandom(disk.WRITEBACK_STEP + 1)
    store.put(key_of(data), ALICE, data)
    assert calls == []
    store.close()


def test_start_writeback_on_a_real_file(tmp_path):
    from flud.storage.fileio import start_writeback

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"x" * 100000)
        start_writeback(fd, 0, 100000)  # advisory: must not raise
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"x" * 100000


def test_a_ranged_read_of_a_large_share_reads_the_next_range_ahead(store, monkeypatch):
    """A restore reads an extent's stream block by block, one RETRIEVE each:
    the block after the one asked for is read ahead, within the share."""
    import flud.storage.reader as reader

    hinted = []
    monkeypatch.setattr(reader, "read_soon", lambda fd, offset, length: hinted.append(
        (offset, length)))
    block = 256 * 1024
    data = os.urandom(3 * block + 1000)
    with store.open_upload(key_of(data), ALICE, len(data)) as upload:
        upload.write(data)
        upload.commit()
    for offset, ahead in [(0, block), (2 * block, 1000)]:
        hinted.clear()
        with store.open_reader(key_of(data), ALICE, offset, block) as r:
            assert hinted[0] == (offset + block, ahead)
            assert r.read() == data[offset:offset + block]
    hinted.clear()
    with store.open_reader(key_of(data), ALICE, 3 * block, 1000) as r:  # small: cached reads
        assert r.read() == data[3 * block:]
    with store.open_reader(key_of(data), ALICE, block, 2 * block + 1000) as r:  # to the end
        r.read()
    assert all(offset + length <= len(data) for offset, length in hinted)
    assert (len(data), 0) not in hinted and not any(o == len(data) for o, _ in hinted)
