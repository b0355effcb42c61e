"""Shared bits of the disk store's unit tests."""

from __future__ import annotations

import io
import tarfile

import blake3

from flud.storage.disk import ShareStore

ALICE = b"A" * 32
BOB = b"B" * 32
CAPACITY = 64 * 1024 * 1024


class SimulatedCrash(BaseException):
    """A BaseException, so the store's `except Exception` clean-ups do not run,
    just as they would not if the process died at that point."""


def key_of(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def make_tar(datas: list[bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for data in datas:
            info = tarfile.TarInfo(key_of(data).hex())
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def put_tar(store, owner: bytes, datas: list[bytes]) -> list[bytes]:
    tar = make_tar(datas)
    return store.put(key_of(tar), owner, tar, kind="archive")


def read_all(store, key: bytes, owner: bytes) -> bytes:
    with store.open_reader(key, owner) as reader:
        return reader.read()


def crash(store: ShareStore) -> None:
    """Drop a store as a dying process would: no close() bookkeeping, just the handle."""
    store._index.close()
