"""Small files compressed before they are encrypted (flud/client/repository/small_contents.py):
the record says so ("z"), the key still comes from the plaintext, a restore
decompresses and checks, and records written without "z" read as before."""
import json
import os
import random

import pytest

from flud.client.repository.small_contents import ContentCheckFailed, open_small, seal_small
from flud.client.records import SmallContent, content_from_wire
from flud.compression import ZSTD
from flud.crypto import content_digest, convergent_key
from flud.errors import UnknownCompression
from tests.unit.client import test_backup_memory
from tests.unit.client.fakes import make_world, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.core.test_compression import text
from tools.treecmp import compare_trees

SECRET = b"s" * 32
K1, K2 = "ab" * 32, "cd" * 32


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def sealed(data: bytes):
    """(SmallContent at offset 0 of a bundle, stored bytes) of `data`."""
    key = convergent_key(SECRET, content_digest(data))
    stored = bytearray(data)
    method = seal_small(key, stored)
    return SmallContent(len(data), key.hex(), K2, 0, len(stored), method), bytes(stored)


def test_the_method_is_written_only_for_a_compressed_file():
    plain = SmallContent(7, K1, K2, 64, 7)
    packed = SmallContent(4000, K1, K2, 64, 900, ZSTD)
    assert "z" not in plain.to_wire()
    assert json.dumps(packed.to_wire(), separators=(",", ":")) == (
        f'{{"t":"S","size":4000,"key":"{K1}","b":"{K2}","o":64,"l":900,"z":"zstd"}}')
    assert content_from_wire(packed.to_wire()) == packed
    assert content_from_wire(plain.to_wire()).method is None


def test_sealing_compresses_text_and_keeps_random_bytes_as_they_are():
    data = text(30_000)
    content, stored = sealed(data)
    assert content.method == ZSTD and content.length < len(data) // 2
    assert open_small(SECRET, content, stored) == data
    noise = os.urandom(30_000)
    content, stored = sealed(noise)
    assert content.method is None and content.length == len(noise)
    assert open_small(SECRET, content, stored) == noise


def test_opening_refuses_bytes_that_are_not_the_content():
    data = text(20_000, seed=2)
    content, stored = sealed(data)
    damaged = bytearray(stored)
    damaged[len(damaged) // 2] ^= 1
    with pytest.raises(ContentCheckFailed):
        open_small(SECRET, content, bytes(damaged))     # does not decompress, or mismatches
    with pytest.raises(ContentCheckFailed):
        open_small(SECRET, content._replace(size=len(data) - 1), stored)
    with pytest.raises(ContentCheckFailed):
        open_small(b"t" * 32, content, stored)          # another user's key
    other, other_stored = sealed(text(20_000, seed=3))
    with pytest.raises(ContentCheckFailed):
        open_small(SECRET, content, other_stored)
    assert ContentCheckFailed.code == "CONTENT_CHECK"


def test_an_unknown_method_is_refused_before_anything_is_decrypted():
    content, stored = sealed(text(10_000, seed=4))
    with pytest.raises(UnknownCompression) as err:
        open_small(SECRET, content._replace(method="zstd-9"), stored)
    assert "'zstd-9'" in str(err.value) and "newer flud" in str(err.value)


def small_files(root, rng):
    """Text files, random files and a few tiny ones; (compressible, random) names."""
    os.makedirs(os.path.join(root, "text"))
    os.makedirs(os.path.join(root, "bin"))
    compressible, incompressible = [], []
    for i in range(25):
        name = os.path.join("text", f"t{i}.py")
        with open(os.path.join(root, name), "wb") as f:
            f.write(text(rng.randint(200, 200_000), seed=i))
        compressible.append(name)
        name = os.path.join("bin", f"b{i}.jpg")
        with open(os.path.join(root, name), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 200_000)))
        incompressible.append(name)
    with open(os.path.join(root, "text", "copy.py"), "wb") as f:  # the same as t3.py
        f.write(text(os.path.getsize(os.path.join(root, "text", "t3.py")), seed=3))
    return compressible, incompressible


def records_by_name(world, summary, root):
    """(the snapshot's manifest, {name under root: its content record})."""
    manifest = snapshot_manifest(world, summary["snapshot"])
    base = os.path.basename(root)
    return manifest, {os.path.relpath(rel, base): manifest["contents"][last]
                      for rel, kind, _, _, _, last in manifest["entries"] if kind == "file"}


def test_a_backup_records_compressed_small_files_and_restores_them_all(world, tmp_path):
    src = str(tmp_path / "src")
    compressible, incompressible = small_files(src, random.Random(1))
    summary, _, _ = run_backup(world, [src])
    assert summary["new"] == 51 and summary["dedup"] == 1  # copy.py is t3.py
    manifest, records = records_by_name(world, summary, src)
    for name in compressible:
        record = records[name]
        assert record["z"] == "zstd" and record["l"] < record["size"], name
        assert record["size"] == os.path.getsize(os.path.join(src, name))
    for name in incompressible:
        record = records[name]
        assert "z" not in record and record["l"] == record["size"], name
    assert records["text/copy.py"] == records["text/t3.py"]   # key from the plaintext
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0 and restored["files"] == 51
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_corrupt_share_under_a_compressed_file_is_rebuilt_from_the_others(world, tmp_path):
    src = str(tmp_path / "src")
    compressible, _ = small_files(src, random.Random(2))
    summary, _, _ = run_backup(world, [src])
    manifest, records = records_by_name(world, summary, src)
    clock, home, network = world
    record = records[compressible[5]]
    bundle = manifest["bundles"][record["b"]]
    block = record["o"] // bundle["bl"]
    index, key_hex, node_hex = next(s for s in bundle["shares"] if s[0] == block)
    network.nodes[bytes.fromhex(node_hex)].corrupt.add(bytes.fromhex(key_hex))
    restored, job = run_restore(world, str(tmp_path / "out"), manifest,
                                [os.path.join("src", compressible[5])])
    assert restored["failed"] == 0 and restored["files"] == 1
    assert any(key == key_hex and "corrupt" in why for _, key, why in job.bad_shares)
    with open(os.path.join(src, compressible[5]), "rb") as f:
        assert (tmp_path / "out" / "src" / compressible[5]).read_bytes() == f.read()


def test_a_record_with_an_unknown_method_fails_alone_and_says_why(world, tmp_path):
    src = str(tmp_path / "src")
    compressible, incompressible = small_files(src, random.Random(3))
    summary, _, _ = run_backup(world, [src])
    manifest, records = records_by_name(world, summary, src)
    records[compressible[0]]["z"] = "lz5"   # as a newer flud might write it
    restored, job = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 1
    [(rel, why)] = job.failed
    assert rel == os.path.join("src", compressible[0])
    assert "'lz5'" in why and "newer flud" in why
    assert not (tmp_path / "out" / "src" / compressible[0]).exists()
    for name in compressible[1:] + incompressible:
        assert (tmp_path / "out" / "src" / name).exists()


@pytest.mark.parametrize("budget_mib", [64, 12, 2])
def test_compressible_small_files_are_counted_to_the_byte(tmp_path, budget_mib):
    """The backup's memory accounting (test_backup_memory's checks after
    every call and every answer) holds when stored bytes are shorter than the
    files: the credit is reserved for the plaintext and given back."""
    world = make_world(tmp_path, nodes=20)
    src = str(tmp_path / "src")
    rng = random.Random(4)
    os.makedirs(src)
    for i in range(300):
        size = rng.choice([1, 700, 5000, 40_000, rng.randint(1, 900_000)])
        data = text(size, seed=i) if i % 3 else rng.randbytes(size)
        with open(os.path.join(src, f"f{i:04d}"), "wb") as f:
            f.write(data)
    budget = budget_mib * 1024 * 1024
    summary, monitor, _, _ = test_backup_memory.run_backup(world, [src], budget=budget)
    assert summary["new"] == 300
    assert test_backup_memory.CheckedSmallFiles.checks > summary["tars"]
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert monitor.peak_buffered_bytes <= max(budget, 8 * 1024 * 1024)
    assert test_backup_memory.restore_matches(world, src, summary["snapshot"],
                                              str(tmp_path / "out"))
