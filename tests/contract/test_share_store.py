"""One contract suite for every IShareStore: the disk ShareStore and MemoryShareStore.

Each test runs once per implementation. Disk-only behaviour (crash recovery,
full disk, on-disk layout) lives in tests/unit/storage.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import blake3
import pytest
from zope.interface.verify import verifyObject

from flud.storage.disk import ShareStore
from flud.storage.errors import (
    BadArchive,
    BadKey,
    BadRange,
    HashMismatch,
    NoSpace,
    NotFound,
    StoreClosed,
    TooLarge,
    UploadClosed,
)
from flud.storage.interfaces import IShareStore
from flud.storage.limits import COMPACT_GARBAGE_RATIO, COMPACT_MIN_BYTES, MAX_ARCHIVE_UPLOAD, MAX_SHARE_SIZE
from flud.storage.memory import MemoryShareStore
from flud.storage.tarscan import member_span
from tests.contract.stores import CAPACITY, make_store  # noqa: F401 (a fixture)

ALICE = b"A" * 32
BOB = b"B" * 32
TAR_BLOCK = 512


def key_of(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def make_tar(datas: list[bytes], fmt: int = tarfile.USTAR_FORMAT, names: list[str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i, data in enumerate(datas):
            info = tarfile.TarInfo(names[i] if names else key_of(data).hex())
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def put_tar(store, owner: bytes, tar: bytes) -> list[bytes]:
    return store.put(key_of(tar), owner, tar, kind="archive")


def read_all(store, key: bytes, owner: bytes, **kw) -> bytes:
    with store.open_reader(key, owner, **kw) as reader:
        return reader.read()


def archive_bytes(store, owner: bytes) -> bytes:
    if isinstance(store, MemoryShareStore):  # the archive as it would be on disk
        with store._lock:
            archive = store._archives.get(owner)
            return bytes(archive.data) if archive else b""
    path = Path(store.root) / "archives" / f"{owner.hex()}.tar"
    return path.read_bytes() if path.exists() else b""


@pytest.fixture
def store(make_store):
    return make_store()


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


# --- shares ---------------------------------------------------------------------


def test_provides_the_interface(store):
    assert verifyObject(IShareStore, store)


def test_put_then_read_round_trip(store):
    data = random_bytes(10_000)
    key = key_of(data)
    assert store.put(key, ALICE, data) == [key]
    assert store.size(key, ALICE) == len(data)
    assert read_all(store, key, ALICE) == data
    with store.open_reader(key, ALICE) as reader:
        assert reader.remaining == len(data)
        pieces = []
        while piece := reader.read(3000):
            pieces.append(piece)
        assert reader.remaining == 0 and reader.read(10) == b""
    assert b"".join(pieces) == data
    assert store.owners(key) == {ALICE}
    assert store.keys(ALICE) == [key]


def test_owner_bytes_counts_each_owners_data_alone(store):
    a, b = random_bytes(10_000), random_bytes(3_000)
    store.put(key_of(a), ALICE, a)
    store.put(key_of(b), ALICE, b)
    store.put(key_of(a), BOB, a)
    assert (store.owner_bytes(ALICE), store.owner_bytes(BOB)) == (13_000, 10_000)
    store.delete(key_of(a), ALICE)
    assert (store.owner_bytes(ALICE), store.owner_bytes(BOB)) == (3_000, 10_000)


def test_empty_share(store):
    key = key_of(b"")
    store.put(key, ALICE, b"")
    assert store.size(key, ALICE) == 0 and read_all(store, key, ALICE) == b""


def test_streamed_upload_in_chunks(store):
    data = random_bytes(100_003)
    key = key_of(data)
    upload = store.open_upload(key, ALICE, len(data))
    view = memoryview(data)
    for start in range(0, len(data), 4096):
        upload.write(view[start : start + 4096])
    assert store.owners(key) == set()  # not visible before commit
    assert upload.commit() == [key]
    assert read_all(store, key, ALICE) == data


def test_hash_mismatch_leaves_nothing_visible(store):
    data = random_bytes(1000)
    wrong_key = key_of(b"something else")
    with pytest.raises(HashMismatch):
        store.put(wrong_key, ALICE, data)
    assert store.owners(wrong_key) == set() and store.keys(ALICE) == []
    with pytest.raises(NotFound):
        store.size(wrong_key, ALICE)
    stats = store.stats()
    assert stats["free"] == CAPACITY and stats["bytes_stored"] == 0 and stats["shares"] == 0


def test_fewer_bytes_than_declared(store):
    data = random_bytes(100)
    upload = store.open_upload(key_of(data), ALICE, 200)
    upload.write(data)
    with pytest.raises(HashMismatch, match="got 100 bytes, expected 200"):
        upload.commit()
    assert store.stats()["free"] == CAPACITY


def test_more_bytes_than_declared(store):
    data = random_bytes(100)
    upload = store.open_upload(key_of(data), ALICE, 50)
    with pytest.raises(TooLarge):
        upload.write(data)
    with pytest.raises(UploadClosed):  # the failure aborted it
        upload.commit()
    assert store.stats()["free"] == CAPACITY and store.owners(key_of(data)) == set()


def test_declared_size_over_the_limits(store):
    with pytest.raises(TooLarge):
        store.open_upload(key_of(b"x"), ALICE, MAX_SHARE_SIZE + 1)
    with pytest.raises(TooLarge):
        store.open_upload(key_of(b"x"), ALICE, MAX_ARCHIVE_UPLOAD + 1, kind="archive")
    with pytest.raises(BadRange):
        store.open_upload(key_of(b"x"), ALICE, -1)


@pytest.mark.parametrize("length", [0, 31, 33])
def test_bad_key(store, length):
    bad = b"k" * length
    with pytest.raises(BadKey):
        store.put(bad, ALICE, b"data")
    for call in (
        lambda: store.size(bad, ALICE),
        lambda: store.open_reader(bad, ALICE),
        lambda: store.verify(bad, ALICE, b"n", 0, 0),
        lambda: store.delete(bad, ALICE),
        lambda: store.size(key_of(b"x"), bad),  # owner ids are checked the same way
    ):
        with pytest.raises(BadKey):
            call()


def test_non_owner_sees_exactly_what_an_unknown_key_shows(store):
    data = b"alice's secret share"
    key = key_of(data)
    store.put(key, ALICE, data)
    unknown = key_of(b"never stored")
    calls = {
        "size": lambda k: store.size(k, BOB),
        "read": lambda k: store.open_reader(k, BOB),
        "verify": lambda k: store.verify(k, BOB, b"nonce", 0, 1),
        "delete": lambda k: store.delete(k, BOB),
    }
    for name, call in calls.items():
        with pytest.raises(NotFound) as as_non_owner:
            call(key)
        with pytest.raises(NotFound) as as_unknown:
            call(unknown)
        assert type(as_non_owner.value) is type(as_unknown.value), name
        assert str(as_non_owner.value) == str(as_unknown.value) == "no such share", name
    assert read_all(store, key, ALICE) == data  # BOB's delete did nothing


def test_two_owners_and_delete_by_one(store):
    data = random_bytes(5000)
    key = key_of(data)
    store.put(key, ALICE, data)
    store.put(key, BOB, data)
    assert store.owners(key) == {ALICE, BOB}
    assert store.stats()["bytes_stored"] == len(data)  # stored once
    store.delete(key, ALICE)
    assert store.owners(key) == {BOB}
    assert read_all(store, key, BOB) == data
    with pytest.raises(NotFound):
        store.size(key, ALICE)


def test_same_owner_storing_twice_counts_once(store):
    data = random_bytes(5000)
    key = key_of(data)
    store.put(key, ALICE, data)
    store.put(key, ALICE, data)
    stats = store.stats()
    assert stats["bytes_stored"] == len(data) and stats["free"] == CAPACITY - len(data)
    store.delete(key, ALICE)
    assert store.owners(key) == set()


def test_delete_by_last_owner_frees_space(store):
    data = random_bytes(5000)
    key = key_of(data)
    store.put(key, ALICE, data)
    store.put(key, BOB, data)
    store.delete(key, ALICE)
    store.delete(key, BOB)
    stats = store.stats()
    assert stats["shares"] == 0 and stats["bytes_stored"] == 0 and stats["free"] == CAPACITY
    with pytest.raises(NotFound):
        store.size(key, BOB)
    store.put(key, ALICE, data)  # can come back
    assert read_all(store, key, ALICE) == data


def test_no_space_when_full_and_still_usable(make_store):
    store = make_store(capacity=10_000)
    first = random_bytes(6000)
    store.put(key_of(first), ALICE, first)
    second = random_bytes(6000)
    with pytest.raises(NoSpace):
        store.put(key_of(second), ALICE, second)
    assert store.owners(key_of(second)) == set()
    small = random_bytes(4000)
    store.put(key_of(small), ALICE, small)
    assert store.stats()["free"] == 0
    store.delete(key_of(first), ALICE)
    store.put(key_of(second), ALICE, second)
    assert read_all(store, key_of(second), ALICE) == second
    assert read_all(store, key_of(small), ALICE) == small


def test_reservations_count_and_abort_releases(make_store):
    store = make_store(capacity=10_000)
    data = random_bytes(6000)
    upload = store.open_upload(key_of(data), ALICE, len(data))
    assert store.stats()["free"] == 4000
    with pytest.raises(NoSpace):  # the reservation is honoured before any byte arrives
        store.open_upload(key_of(b"other"), ALICE, 6000)
    upload.write(data[:100])
    upload.abort()
    upload.abort()  # idempotent
    assert store.stats()["free"] == 10_000 and store.owners(key_of(data)) == set()
    with pytest.raises(UploadClosed):
        upload.write(b"more")
    assert store.put(key_of(data), ALICE, data) == [key_of(data)]


def test_commit_twice_is_an_error_and_abort_after_commit_is_a_no_op(store):
    data = b"once"
    upload = store.open_upload(key_of(data), ALICE, len(data))
    upload.write(data)
    upload.commit()
    with pytest.raises(UploadClosed):
        upload.commit()
    upload.abort()
    assert read_all(store, key_of(data), ALICE) == data


def test_context_manager_aborts_an_uncommitted_upload(store):
    data = random_bytes(1000)
    with store.open_upload(key_of(data), ALICE, len(data)) as upload:
        upload.write(data)
    assert store.owners(key_of(data)) == set() and store.stats()["free"] == CAPACITY


def test_ranges(store):
    data = bytes(range(256)) * 40
    key = key_of(data)
    store.put(key, ALICE, data)
    assert read_all(store, key, ALICE, offset=100, length=50) == data[100:150]
    assert read_all(store, key, ALICE, offset=1000) == data[1000:]
    assert read_all(store, key, ALICE, offset=len(data)) == b""
    assert read_all(store, key, ALICE, offset=len(data) - 1, length=1) == data[-1:]
    with store.open_reader(key, ALICE, offset=10, length=20) as reader:
        assert reader.remaining == 20
    for offset, length in [(len(data) + 1, None), (0, len(data) + 1), (len(data) - 5, 6), (-1, None), (0, -1)]:
        with pytest.raises(BadRange):
            store.open_reader(key, ALICE, offset=offset, length=length)
    with pytest.raises(BadRange):
        store.verify(key, ALICE, b"n", len(data), 1)


def test_verify_digest(store):
    data = random_bytes(3 * 1024 * 1024 + 17)  # several IO chunks
    key = key_of(data)
    store.put(key, ALICE, data)
    nonce = b"fresh nonce"
    for offset, length in [(0, len(data)), (5, 1000), (1024 * 1024 - 3, 2 * 1024 * 1024), (len(data), 0)]:
        expected = blake3.blake3(nonce + data[offset : offset + length]).digest()
        assert store.verify(key, ALICE, nonce, offset, length) == expected


def test_reader_survives_a_delete(store):
    data = random_bytes(20_000)
    key = key_of(data)
    store.put(key, ALICE, data)
    reader = store.open_reader(key, ALICE)
    store.delete(key, ALICE)
    assert reader.read() == data
    reader.close()


# --- archives ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT])
def test_archive_members_are_read_verified_and_deleted_by_key(store, fmt):
    datas = [random_bytes(n) for n in (0, 1, 511, 512, 513, 5000)]
    tar = make_tar(datas, fmt)
    keys = put_tar(store, ALICE, tar)
    assert keys == [key_of(d) for d in datas]
    with pytest.raises(NotFound):  # the tar itself is not stored under its key
        store.size(key_of(tar), ALICE)
    stats = store.stats()
    assert stats["members"] == len(datas) and stats["archives"] == 1 and stats["shares"] == 0
    for data in datas:
        key = key_of(data)
        assert store.size(key, ALICE) == len(data)
        assert read_all(store, key, ALICE) == data
        if data:
            assert read_all(store, key, ALICE, offset=1, length=len(data) - 1) == data[1:]
        assert store.verify(key, ALICE, b"nonce", 0, len(data)) == blake3.blake3(b"nonce" + data).digest()
        with pytest.raises(NotFound):
            store.size(key, BOB)
    for data in datas:
        store.delete(key_of(data), ALICE)
        with pytest.raises(NotFound):
            read_all(store, key_of(data), ALICE)
    assert store.stats()["members"] == 0 and store.keys(ALICE) == []


def test_archive_is_append_only(store):
    first = [random_bytes(3000), random_bytes(100)]
    put_tar(store, ALICE, make_tar(first))
    before = archive_bytes(store, ALICE)
    assert len(before) == sum(member_span(len(d)) for d in first)  # end-of-archive zeros stripped
    second = [random_bytes(7000)]
    put_tar(store, ALICE, make_tar(second))
    after = archive_bytes(store, ALICE)
    assert len(after) > len(before) and after[: len(before)] == before
    for data in first + second:
        assert read_all(store, key_of(data), ALICE) == data
    store.delete(key_of(first[0]), ALICE)  # deleting does not rewrite either
    assert archive_bytes(store, ALICE) == after
    tarfile.open(fileobj=io.BytesIO(after)).getmembers()  # still a valid tar


def test_archives_are_per_sender(store):
    shared = random_bytes(2000)
    put_tar(store, ALICE, make_tar([shared]))
    put_tar(store, BOB, make_tar([shared, b"bob only"]))
    assert store.owners(key_of(shared)) == {ALICE, BOB}
    store.delete(key_of(shared), ALICE)
    assert read_all(store, key_of(shared), BOB) == shared
    with pytest.raises(NotFound):
        store.size(key_of(b"bob only"), ALICE)
    assert store.stats()["archives"] == 2


def _bad_tars() -> dict[str, bytes]:
    good = random_bytes(1000)
    valid = make_tar([good, random_bytes(300)])
    flipped = bytearray(valid)
    flipped[512 + 10] ^= 0xFF  # member data no longer matches its name
    bad_checksum = bytearray(valid)
    bad_checksum[100] ^= 0x01  # a header byte (mode) changed, checksum not updated
    directory = io.BytesIO()
    with tarfile.open(fileobj=directory, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(key_of(b"d").hex())
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    return {
        "not a tar": random_bytes(2048),
        "name not hex": make_tar([good], names=["hello.txt"]),
        "name is uppercase hex": make_tar([good], names=[key_of(good).hex().upper()]),
        "member hash mismatch": bytes(flipped),
        "bad header checksum": bytes(bad_checksum),
        "directory member": directory.getvalue(),
        "truncated": valid[:1200],
        "junk after the end marker": valid + b"\x01" + bytes(511),
        "pax format": _pax_tar(good),
    }


def _pax_tar(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(key_of(data).hex())
        info.size = len(data)
        info.pax_headers = {"comment": "x"}
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("case", sorted(_bad_tars()))
def test_malformed_archive_is_refused_and_nothing_becomes_visible(store, case):
    put_tar(store, ALICE, make_tar([b"already there"]))
    before, stats_before = archive_bytes(store, ALICE), store.stats()
    keys_before = store.keys(ALICE)
    with pytest.raises(BadArchive):
        put_tar(store, ALICE, _bad_tars()[case])
    assert archive_bytes(store, ALICE) == before
    assert store.keys(ALICE) == keys_before
    assert store.stats() == stats_before


def test_archive_whose_own_key_is_wrong(store):
    tar = make_tar([b"member"])
    with pytest.raises(HashMismatch):
        store.put(key_of(b"not the tar"), ALICE, tar, kind="archive")
    assert store.keys(ALICE) == [] and archive_bytes(store, ALICE) == b""


def test_archive_streamed_in_odd_chunks(store):
    datas = [random_bytes(n) for n in (700, 1, 4096, 10_000)]
    tar = make_tar(datas)
    upload = store.open_upload(key_of(tar), ALICE, len(tar), kind="archive")
    for start in range(0, len(tar), 333):
        upload.write(tar[start : start + 333])
    assert upload.commit() == [key_of(d) for d in datas]
    for data in datas:
        assert read_all(store, key_of(data), ALICE) == data


def test_garbage_accounting(store):
    datas = [random_bytes(n) for n in (1000, 2000, 3000)]
    put_tar(store, ALICE, make_tar(datas))
    length = len(archive_bytes(store, ALICE))
    assert store.stats()["garbage_bytes"] == 0 and store.stats()["bytes_stored"] == length
    store.delete(key_of(datas[1]), ALICE)
    stats = store.stats()
    assert stats["garbage_bytes"] == member_span(2000)
    assert stats["bytes_stored"] == length  # garbage still occupies the disk
    assert stats["members"] == 2


def test_members_the_owner_already_holds_become_garbage(store):
    old = random_bytes(1500)
    loose = random_bytes(800)
    put_tar(store, ALICE, make_tar([old]))
    store.put(key_of(loose), ALICE, loose)
    new = random_bytes(100)
    keys = put_tar(store, ALICE, make_tar([old, loose, new, new]))
    assert keys == [key_of(old), key_of(loose), key_of(new)]
    stats = store.stats()
    assert stats["garbage_bytes"] == member_span(1500) + member_span(800) + member_span(100)
    assert stats["members"] == 2 and stats["shares"] == 1
    for data in (old, loose, new):
        assert read_all(store, key_of(data), ALICE) == data


def test_compaction_keeps_live_members_readable(store):
    datas = [random_bytes(n) for n in (1000, 20_000, 1, 7000, 512, 3000)]
    put_tar(store, ALICE, make_tar(datas[:3]))
    put_tar(store, ALICE, make_tar(datas[3:]))
    put_tar(store, BOB, make_tar([datas[1]]))
    length = len(archive_bytes(store, ALICE))
    dead = [datas[1], datas[4]]
    for data in dead:
        store.delete(key_of(data), ALICE)
    garbage = store.stats()["garbage_bytes"]
    assert store.compact(ALICE) == garbage
    stats = store.stats()
    assert stats["garbage_bytes"] == 0
    assert len(archive_bytes(store, ALICE)) == length - garbage
    for data in datas:
        if data not in dead:
            assert read_all(store, key_of(data), ALICE) == data
            assert store.verify(key_of(data), ALICE, b"n", 0, len(data)) == blake3.blake3(b"n" + data).digest()
    assert read_all(store, key_of(datas[1]), BOB) == datas[1]
    names = [m.name for m in tarfile.open(fileobj=io.BytesIO(archive_bytes(store, ALICE))).getmembers()]
    assert names == [key_of(d).hex() for d in datas if d not in dead]
    assert store.compact(ALICE) == 0  # nothing left to reclaim
    more = random_bytes(900)
    put_tar(store, ALICE, make_tar([more]))  # appends continue after compaction
    assert read_all(store, key_of(more), ALICE) == more


def test_reader_open_across_a_compaction(store):
    datas = [random_bytes(5000), random_bytes(6000)]
    put_tar(store, ALICE, make_tar(datas))
    store.delete(key_of(datas[0]), ALICE)
    reader = store.open_reader(key_of(datas[1]), ALICE)
    first = reader.read(100)
    store.compact(ALICE)
    assert first + reader.read() == datas[1]
    reader.close()


def test_delete_compacts_an_archive_once_its_garbage_passes_the_ratio(store):
    big = [random_bytes(COMPACT_MIN_BYTES // 4) for _ in range(10)]
    put_tar(store, ALICE, make_tar(big))
    length = len(archive_bytes(store, ALICE))
    span = member_span(len(big[0]))
    dead = 0
    while (dead + 1) * span <= COMPACT_GARBAGE_RATIO * length:  # deletes that stay at or below it
        store.delete(key_of(big[dead]), ALICE)
        dead += 1
        assert store.stats()["garbage_bytes"] == dead * span  # not yet
    assert dead >= 1
    store.delete(key_of(big[dead]), ALICE)  # past the ratio: compacted
    dead += 1
    stats = store.stats()
    assert stats["garbage_bytes"] == 0
    assert stats["bytes_stored"] == len(archive_bytes(store, ALICE)) == length - dead * span
    for data in big[dead:]:
        assert read_all(store, key_of(data), ALICE) == data


def test_delete_without_compaction_leaves_it_to_the_caller(store):
    big = [random_bytes(COMPACT_MIN_BYTES // 4) for _ in range(10)]
    put_tar(store, ALICE, make_tar(big))
    put_tar(store, BOB, make_tar(big[:1]))
    assert store.compactions_due() == []
    for data in big[:5]:
        store.delete(key_of(data), ALICE, compact=False)
    assert store.stats()["garbage_bytes"] == 5 * member_span(len(big[0]))
    assert store.compactions_due() == [ALICE]
    assert store.compact(ALICE) == 5 * member_span(len(big[0]))
    assert store.compactions_due() == []
    for data in big[5:]:
        assert read_all(store, key_of(data), ALICE) == data


def test_empty_tar_stores_nothing(store):
    assert put_tar(store, ALICE, make_tar([])) == []
    assert store.stats()["archives"] == 0 and store.stats()["free"] == CAPACITY


def test_archive_capacity(make_store):
    datas = [random_bytes(3000), random_bytes(3000)]
    tar = make_tar(datas)
    store = make_store(capacity=len(tar) - 1)
    with pytest.raises(NoSpace):
        put_tar(store, ALICE, tar)
    store = make_store(capacity=len(tar))
    put_tar(store, ALICE, tar)  # the trailing zero blocks are not kept
    assert store.stats()["bytes_stored"] == sum(member_span(len(d)) for d in datas)


def test_closed_store_refuses_calls(store):
    data = b"x"
    store.put(key_of(data), ALICE, data)
    store.close()
    with pytest.raises(StoreClosed):
        store.size(key_of(data), ALICE)
    with pytest.raises(StoreClosed):
        store.put(key_of(b"y"), ALICE, b"y")


# --- streamed shares: the key follows the data ---------------------------------------


def open_streamed(store, owner: bytes, size: int):
    return store.open_upload(None, owner, size, kind="streamed share")


def put_streamed(store, owner: bytes, data: bytes, trailer: bytes | None = None) -> list[bytes]:
    with open_streamed(store, owner, len(data)) as upload:
        upload.write(data + (key_of(data) if trailer is None else trailer))
        return upload.commit()


def test_streamed_share_is_stored_under_the_key_it_ends_with(store):
    data = random_bytes(100_003)
    key = key_of(data)
    upload = open_streamed(store, ALICE, len(data))
    assert store.stats()["reserved"] == len(data)  # the key is not stored, nor reserved
    blob = memoryview(data + key)
    for start in range(0, len(blob), 4096):
        upload.write(blob[start : start + 4096])
    assert store.owners(key) == set()  # not visible before commit
    assert upload.commit() == [key]
    assert store.size(key, ALICE) == len(data) and read_all(store, key, ALICE) == data
    assert read_all(store, key, ALICE, offset=4000, length=5000) == data[4000:9000]
    assert store.verify(key, ALICE, b"n", 7, 100) == blake3.blake3(b"n" + data[7:107]).digest()
    stats = store.stats()
    assert (stats["shares"], stats["bytes_stored"], stats["reserved"]) == (1, len(data), 0)
    store.delete(key, ALICE)
    assert store.owners(key) == set() and store.stats()["free"] == CAPACITY


@pytest.mark.parametrize("in_share,in_next", [(0, 0), (0, 32), (5, 0), (5, 1), (5, 16), (5, 31), (1, 32)])
def test_streamed_share_with_its_key_split_across_pieces_and_writes(store, in_share, in_next):
    """The key may start in one piece of a frame and end in the next frame."""
    data = random_bytes(3000)
    blob = data + key_of(data)
    cut = len(data) - in_share
    upload = open_streamed(store, ALICE, len(data))
    upload.write_pieces([blob[:cut], memoryview(blob)[cut : cut + in_share + 32 - in_next]])
    upload.write_pieces([blob[cut + in_share + 32 - in_next :]])
    assert upload.commit() == [key_of(data)]
    assert read_all(store, key_of(data), ALICE) == data


def test_streamed_share_written_a_byte_at_a_time(store):
    data = random_bytes(50)
    blob = data + key_of(data)
    with open_streamed(store, ALICE, len(data)) as upload:
        for i in range(len(blob)):
            upload.write(blob[i : i + 1])
        assert upload.commit() == [key_of(data)]
    assert read_all(store, key_of(data), ALICE) == data


def test_empty_streamed_share(store):
    assert put_streamed(store, ALICE, b"") == [key_of(b"")]
    assert read_all(store, key_of(b""), ALICE) == b""


@pytest.mark.parametrize("spoil", ["key", "data"])
def test_streamed_share_not_matching_its_key_leaves_nothing(store, spoil):
    data = random_bytes(5000)
    trailer = key_of(data)
    if spoil == "key":
        trailer = key_of(b"another share")
    else:
        data = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(HashMismatch, match="does not match its key"):
        put_streamed(store, ALICE, data, trailer)
    assert store.owners(trailer) == store.owners(key_of(data)) == set() and store.keys(ALICE) == []
    stats = store.stats()
    assert (stats["shares"], stats["bytes_stored"], stats["free"]) == (0, 0, CAPACITY)


def test_streamed_share_of_a_key_already_held_adds_its_owner_once(store):
    data = random_bytes(5000)
    key = key_of(data)
    store.put(key, BOB, data)
    assert put_streamed(store, ALICE, data) == [key]
    assert put_streamed(store, ALICE, data) == [key]
    assert store.owners(key) == {ALICE, BOB}
    stats = store.stats()
    assert (stats["shares"], stats["bytes_stored"], stats["reserved"]) == (1, len(data), 0)
    assert stats["free"] == CAPACITY - len(data)
    store.delete(key, BOB)
    assert read_all(store, key, ALICE) == data
    store.delete(key, ALICE)
    assert store.stats()["free"] == CAPACITY


@pytest.mark.parametrize("trailer_bytes", [0, 31])
def test_streamed_share_missing_key_bytes(store, trailer_bytes):
    data = random_bytes(1000)
    upload = open_streamed(store, ALICE, len(data))
    upload.write(data + key_of(data)[:trailer_bytes])
    with pytest.raises(HashMismatch, match=f"got {1000 + trailer_bytes} bytes, expected 1032"):
        upload.commit()
    assert store.owners(key_of(data)) == set() and store.stats()["free"] == CAPACITY


def test_streamed_share_with_bytes_after_its_key(store):
    data = random_bytes(1000)
    upload = open_streamed(store, ALICE, len(data))
    upload.write(data + key_of(data)[:20])
    with pytest.raises(TooLarge):
        upload.write(key_of(data)[20:] + b"x")
    with pytest.raises(UploadClosed):
        upload.commit()
    assert store.owners(key_of(data)) == set() and store.stats()["free"] == CAPACITY


def test_streamed_share_aborted_mid_stream(store):
    data = random_bytes(10_000)
    with open_streamed(store, ALICE, len(data)) as upload:
        upload.write(data[:6000])
    assert upload.state.value == "aborted"
    stats = store.stats()
    assert (stats["reserved"], stats["free"], stats["shares"]) == (0, CAPACITY, 0)
    upload = open_streamed(store, ALICE, len(data))
    upload.write(data + key_of(data)[:1])  # into the key
    upload.abort()
    assert store.owners(key_of(data)) == set() and store.stats()["free"] == CAPACITY


def test_streamed_share_space_is_its_size(make_store):
    data = random_bytes(6000)
    with pytest.raises(NoSpace):
        put_streamed(make_store(capacity=len(data) - 1), ALICE, data)
    store = make_store(capacity=len(data))
    put_streamed(store, ALICE, data)  # its key takes no space
    assert store.stats()["free"] == 0
    with pytest.raises(TooLarge):
        open_streamed(store, ALICE, MAX_SHARE_SIZE + 1)


def test_streamed_share_is_opened_without_a_key(store):
    with pytest.raises(ValueError):
        store.open_upload(key_of(b"x"), ALICE, 1, kind="streamed share")
    with pytest.raises(BadKey):
        store.open_upload(None, ALICE, 1)
