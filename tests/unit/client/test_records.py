"""The client's records read and write exactly the JSON written before they
existed (flud/client/records.py): literal shapes, and a manifest, its index
rows and its shares as the code at commit 1ae7108 wrote them
(data/manifest_1ae7108.json, made with a 10 KiB large file in one extent,
two small files in a bundle, an empty file, a symlink and two directories)."""
import base64
import json
import os
import zlib

import pytest

from flud.client.repository import extents
from tests.unit.client.v1_writer import build_manifest, manifest_ref_to_wire
from flud.client.records import (DIRECTORY, FILE, BlockHolder, Bundle, Challenge, EmptyContent,
                                 Entry, Extent, ExtentSegment, LargeContent, SegmentFetch,
                                 ShareHolder,
                                 SmallContent, StoredSegment, content_from_wire,
                                 entries_from_wire, manifest_ref_segments)
from tests.unit.client.fakes import make_world
from tests.unit.client.test_pipeline import run_backup, run_restore

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "manifest_1ae7108.json")
K1, K2, N1, N2 = "ab" * 32, "cd" * 32, "01" * 32, "02" * 32


def compact(value) -> str:
    """As the index and the manifest write JSON."""
    return json.dumps(value, separators=(",", ":"))


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as f:
        return json.load(f)


def test_each_record_writes_the_literal_shape():
    cases = [
        (Entry("src/a", FILE, 0o644, 5, 9, "cid"), '["src/a","file",420,5,9,"cid"]'),
        (Entry("src", DIRECTORY, 0o755, 5, 0, ""), '["src","dir",493,5,0,""]'),
        (ShareHolder(3, K1, N1), f'[3,"{K1}","{N1}"]'),
        (EmptyContent(0), '{"t":"E","size":0}'),
        (SmallContent(7, K1, K2, 64, 7), f'{{"t":"S","size":7,"key":"{K1}","b":"{K2}","o":64,"l":7}}'),
        (ExtentSegment(K1, 4096, 1024, "aa" * 8), f'["{K1}",4096,1024,"{"aa" * 8}"]'),
        (StoredSegment(K1, 9, 3, (ShareHolder(0, K2, N1),)), f'["{K1}",9,3,[[0,"{K2}","{N1}"]]]'),
        (Extent((ShareHolder(0, K1, N1), ShareHolder(1, K2, N2)),
                (ExtentSegment(K1, 8, 4, "0102"),)),
         f'{{"shares":[[0,"{K1}","{N1}"],[1,"{K2}","{N2}"]],"segs":[["{K1}",8,4,"0102"]]}}'),
        (LargeContent(8, extents=(Extent((ShareHolder(0, K1, N1),),
                                         (ExtentSegment(K2, 8, 8, "ff"),)),)),
         f'{{"t":"L","size":8,"ext":[{{"shares":[[0,"{K1}","{N1}"]],"segs":[["{K2}",8,8,"ff"]]}}]}}'),
        (LargeContent(9, segments=(StoredSegment(K1, 9, 3, (ShareHolder(0, K2, N1),)),)),
         f'{{"t":"L","size":9,"segs":[["{K1}",9,3,[[0,"{K2}","{N1}"]]]]}}'),
        (Bundle(5, 4, 8, 2, (ShareHolder(0, K1, N1),)),
         f'{{"len":5,"k":4,"n":8,"bl":2,"shares":[[0,"{K1}","{N1}"]]}}'),
        (Challenge(0, 100, "ee" * 16), f'[0,100,"{"ee" * 16}"]'),
        (Challenge(5, 64, "ee" * 16, "dd" * 16), f'[5,64,"{"ee" * 16}","{"dd" * 16}"]'),
    ]
    for record, literal in cases:
        assert compact(record.to_wire()) == literal, record
        if not isinstance(record, (EmptyContent, SmallContent, LargeContent)):
            assert type(record).from_wire(json.loads(literal)) == record
        else:
            assert content_from_wire(json.loads(literal)) == record
    ref = manifest_ref_to_wire(10, [StoredSegment(K1, 9, 3, (ShareHolder(0, K2, N1),))])
    assert compact(ref) == f'{{"size":10,"segs":[["{K1}",9,3,[[0,"{K2}","{N1}"]]]]}}'
    assert manifest_ref_segments(ref)[0].holders == (ShareHolder(0, K2, N1),)


def test_an_extent_segment_is_fetched_block_by_block_from_its_streams():
    extent = Extent((ShareHolder(0, K1, N1), ShareHolder(1, K2, N2)),
                    (ExtentSegment("s0", 8, 4, "aabb"), ExtentSegment("s1", 6, 3, "ccdd")))
    fetches = list(LargeContent(14, extents=(extent,)).segment_fetches())
    assert fetches == [
        SegmentFetch("s0", 8, 4, (BlockHolder(0, K1, N1, 0, "aa"), BlockHolder(1, K2, N2, 0, "bb"))),
        SegmentFetch("s1", 6, 3, (BlockHolder(0, K1, N1, 4, "cc"), BlockHolder(1, K2, N2, 4, "dd")))]
    assert fetches[1].holders[1].retrieve_range(3) == (4, 3)
    assert ShareHolder(0, K1, N1).retrieve_range(3) == ()


def test_every_index_row_written_before_reads_and_writes_back_byte_identical(golden):
    rows = golden["index_rows"]
    for cid, blob in rows["contents"]:
        assert compact(content_from_wire(json.loads(blob)).to_wire()) == blob
    for _, blob in rows["bundles"]:
        assert compact(Bundle.from_wire(json.loads(blob)).to_wire()) == blob
    for _, blob in rows["segments"]:
        assert compact(Extent.from_wire(json.loads(blob)).to_wire()) == blob
    kinds = set()
    for _, blob in rows["challenges"]:
        challenges = [Challenge.from_wire(c) for c in json.loads(blob)]
        kinds.add(challenges[0].nonce is None)
        assert compact([c.to_wire() for c in challenges]) == blob
    assert kinds == {True, False}  # a bundle's shares and an extent's streams


def _golden_index(home, golden):
    """The index rows exactly as they were written (bytes as stored)."""
    for table, rows in golden["index_rows"].items():
        home.index.db.executemany(f"INSERT INTO {table} VALUES (?,?)",
                                  [(key, blob.encode()) for key, blob in rows])


def test_the_manifest_is_written_byte_identical_from_the_same_index(golden, tmp_path):
    _, home, _ = make_world(tmp_path, nodes=1)
    _golden_index(home, golden)
    before = zlib.decompress(base64.b64decode(golden["manifest_json_zlib"]))
    manifest = json.loads(before)
    head = {key: manifest[key] for key in ("version", "snapshot", "created", "roots", "k", "n")}
    entries = entries_from_wire(manifest["entries"])
    again = zlib.decompress(build_manifest(home.index, head, entries, manifest["history"]))
    assert again == before


def _golden_tree(root, golden):
    os.makedirs(os.path.join(root, "sub"))
    files = {rel: base64.b64decode(data) for rel, data in golden["files"].items()}
    for rel, data in files.items():
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    os.symlink("sub/a.txt", os.path.join(root, "link"))
    for i, rel in enumerate(sorted(files)):
        os.utime(os.path.join(root, rel), ns=(10**18 + i, 10**18 + i))
    return files


def test_a_backup_of_the_same_files_writes_the_same_index_rows(golden, tmp_path, monkeypatch):
    """Same secret, same nodes, same files: every content, bundle, extent and
    challenge row is byte for byte what the code before records wrote (the
    bundles and challenges of the snapshot's own records come beside them)."""
    world = make_world(tmp_path, nodes=10)
    clock, home, network = world
    home.secret = base64.b64decode(golden["secret"])
    # chunk_size 0: large files in fixed extents, the format these rows pin
    home.config.update(segment_size=4096, small_file_limit=2048, chunk_size=0)
    monkeypatch.setattr(extents, "EXTENT_BYTES", 4 * 4096)
    _golden_tree(str(tmp_path / "src"), golden)
    run_backup(world, [str(tmp_path / "src")])
    for table, rows in golden["index_rows"].items():
        written = [[key, blob.decode() if isinstance(blob, bytes) else blob] for key, blob in
                   home.index.db.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        if table in ("bundles", "challenges"):
            assert all(row in written for row in rows), table
        else:
            assert sorted(written) == sorted(rows), table


def test_a_manifest_written_before_records_still_restores(golden, tmp_path):
    world = make_world(tmp_path, nodes=10)
    clock, home, network = world
    home.secret = base64.b64decode(golden["secret"])
    network.client_id = bytes.fromhex(golden["client_id"])
    for node_hex, shares in golden["shares"].items():
        node = network.nodes[bytes.fromhex(node_hex)]
        for key_hex, data in shares.items():  # a bundle's as a share: read by range alike
            node.store_(network.client_id, bytes.fromhex(key_hex), base64.b64decode(data))
    manifest = json.loads(zlib.decompress(base64.b64decode(golden["manifest_json_zlib"])))
    dest = str(tmp_path / "out")
    summary, _ = run_restore(world, dest, manifest)
    assert summary["failed"] == summary["refused"] == summary["bad_shares"] == 0
    for rel, data in golden["files"].items():
        with open(os.path.join(dest, "src", rel), "rb") as f:
            assert f.read() == base64.b64decode(data), rel
    assert os.readlink(os.path.join(dest, "src", "link")) == "sub/a.txt"
    assert summary["files"] == len(golden["files"]) and summary["symlinks"] == 1

