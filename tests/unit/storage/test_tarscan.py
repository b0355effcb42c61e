"""The incremental tar scanner against tarfile's own idea of where members are."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from flud.storage.errors import BadArchive
from flud.storage.tarscan import TAR_BLOCK, TarScanner, member_span, padded

from .helpers import key_of


def _tar(datas: list[bytes], fmt: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for data in datas:
            info = tarfile.TarInfo(key_of(data).hex())
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _scan(tar: bytes, chunk: int):
    scanner = TarScanner()
    for start in range(0, len(tar), chunk):
        scanner.feed(tar[start : start + chunk])
    return scanner.finish()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT])
@pytest.mark.parametrize("chunk", [1, 511, 512, 513, 4096, 1 << 20])
def test_offsets_match_tarfile_for_any_chunking(fmt, chunk):
    datas = [os.urandom(n) for n in (0, 1, 511, 512, 513, 1500)]
    tar = _tar(datas, fmt)
    members, body_length = _scan(tar, chunk)
    expected = tarfile.open(fileobj=io.BytesIO(tar)).getmembers()
    assert [(m.data_offset, m.length) for m in members] == [(t.offset_data, t.size) for t in expected]
    assert [m.key for m in members] == [key_of(d) for d in datas]
    assert body_length == sum(member_span(len(d)) for d in datas)
    assert all(tar[body_length:][i] == 0 for i in range(0, len(tar) - body_length, 97))


def test_without_end_blocks_and_empty():
    tar = _tar([b"abc"], tarfile.USTAR_FORMAT)
    body = tar[: member_span(3)]
    assert _scan(body, 100)[1] == len(body)
    assert TarScanner().finish() == ([], 0)


def test_refuses_a_cut_inside_a_member():
    tar = _tar([os.urandom(2000)], tarfile.USTAR_FORMAT)
    for cut in (100, TAR_BLOCK, TAR_BLOCK + 1999, TAR_BLOCK + 2001):
        with pytest.raises(BadArchive, match="truncated"):
            _scan(tar[:cut], 4096)


def test_refuses_a_trailer_not_on_a_block_boundary():
    tar = _tar([b"x"], tarfile.USTAR_FORMAT)
    with pytest.raises(BadArchive, match="block boundary"):
        _scan(tar + bytes(10), 4096)


def test_helpers():
    assert padded(0) == 0 and padded(1) == 512 and padded(512) == 512 and padded(513) == 1024
    assert member_span(0) == 512 and member_span(100) == 1024
