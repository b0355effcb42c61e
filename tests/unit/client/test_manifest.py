"""The manifest is built from the index a row at a time (the old release's writer, kept in tests/unit/client/v1_writer.py to write fixtures)."""
import json
import sqlite3
import tracemalloc
import zlib

import pytest

from flud.client import index as index_module
from flud.client.index import ClientIndex
from tests.unit.client.v1_writer import ManifestIncomplete, build_manifest
from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.records import entries_from_wire

HEAD = {"version": 1, "snapshot": 3, "created": 1.5, "roots": ["/src"], "k": 4, "n": 8}


def key(i: int, tag: str = "s") -> str:
    return f"{tag}{i:063x}"


def challenges(i: int) -> list:
    return [[i, 1024, f"{i:032x}"], [i + 1, 2048, f"{i + 1:032x}"]]


def fill(index, unrelated: int = 0):
    """Two large files, two small files in one bundle, an empty file; and
    `unrelated` challenges of shares no content of this snapshot uses."""
    contents = {
        "big": {"t": "L", "size": 9, "segs": [["g0", 9, 3, [[0, key(1), "n1"], [1, key(2), "n2"]]]]},
        "big2": {"t": "L", "size": 5, "segs": [["g1", 5, 2, [[0, key(3), "n3"]]]]},
        "sm1": {"t": "S", "size": 2, "key": "aa", "b": "b1"},
        "sm2": {"t": "S", "size": 3, "key": "bb", "b": "b1"},
        "empty": {"t": "E", "size": 0},
        "old": {"t": "L", "size": 1, "segs": [["g9", 1, 1, [[0, key(9), "n9"]]]]},
    }
    bundles = {"b1": {"len": 5, "k": 4, "n": 8, "bl": 2, "shares": [[0, key(4), "n4"]],
                      "files": [["sm1", 0, 2], ["sm2", 2, 3]]},
               "b0": {"len": 1, "k": 4, "n": 8, "bl": 1, "shares": [[0, key(8), "n8"]],
                      "files": []}}
    index.add_contents(contents.items())
    index.add_bundles(bundles.items())
    index.add_challenges([(key(i), challenges(i)) for i in (1, 2, 3, 4, 8, 9)])
    index.add_challenges((key(i, "u"), challenges(i)) for i in range(unrelated))
    entries = [["src/a", "file", 0o644, 1, 9, "big"], ["src/b", "file", 0o644, 1, 5, "big2"],
               ["src/c", "file", 0o644, 1, 2, "sm1"], ["src/d", "file", 0o644, 1, 3, "sm2"],
               ["src/e", "file", 0o644, 1, 0, "empty"], ["src/f", "file", 0o644, 1, 9, "big"],
               ["src/l", "symlink", 0o777, 1, 0, "a"], ["src", "dir", 0o755, 1, 0, ""]]
    return contents, bundles, entries


def built(index, entries, history=()):
    """The manifest of `entries` (as written: lists), read back."""
    blob = build_manifest(index, HEAD, entries_from_wire(entries), list(history))
    return json.loads(zlib.decompress(blob))


def test_the_streamed_manifest_holds_exactly_what_the_snapshot_uses(tmp_path):
    index = ClientIndex(str(tmp_path / "index.db"))
    contents, bundles, entries = fill(index)
    history = [{"id": 2, "created": 1.0, "manifest": {"size": 1, "segs": []}}]
    used = {k: v for k, v in contents.items() if k != "old"}
    assert built(index, entries, history) == {**HEAD, "entries": entries, "contents": used,
                     "bundles": {"b1": bundles["b1"]},
                     "challenges": {key(i): challenges(i) for i in (1, 2, 3, 4)},
                     "history": history}


def test_many_entries_span_several_batches_and_flushes(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.unit.client.v1_writer.FLUSH_AT", 512)
    index = ClientIndex(str(tmp_path / "index.db"))
    entries = [[f"src/{i}", "symlink", 0o777, i, 0, "t" * (i % 7)] for i in range(1000)]
    manifest = built(index, entries)
    assert manifest["entries"] == entries
    assert manifest["contents"] == manifest["bundles"] == manifest["challenges"] == {}


def test_what_other_snapshots_use_is_never_all_in_memory(tmp_path):
    """20000 challenge rows of older snapshots (~2 MB as JSON, ~15 MB as
    objects): building a manifest that uses six shares stays far below that."""
    index = ClientIndex(str(tmp_path / "index.db"))
    _, _, entries = fill(index, unrelated=20000)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        build_manifest(index, HEAD, entries_from_wire(entries), [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 512 * 1024


def test_a_content_missing_from_the_index_is_a_typed_error(tmp_path):
    index = ClientIndex(str(tmp_path / "index.db"))
    _, _, entries = fill(index)
    entries.append(["src/g", "file", 0o644, 1, 4, "not-there"])
    with pytest.raises(ManifestIncomplete):
        build_manifest(index, HEAD, entries_from_wire(entries), [])


def test_a_version_1_index_moves_its_challenges_to_their_table(tmp_path, monkeypatch):
    path = str(tmp_path / "index.db")
    monkeypatch.setattr(index_module, "SCHEMA_VERSION", 1)
    old = ClientIndex(path)
    old.set_meta("challenges", {key(1): challenges(1), key(2): challenges(2)})
    old.set_meta("verify_round", 4)
    old.close()
    monkeypatch.undo()
    index = ClientIndex(path)
    assert index.challenges(key(1)) == challenges(1)
    assert index.challenges(key(2)) == challenges(2)
    assert index.get_meta("challenges") is None
    assert index.get_meta("verify_round") == 4
    version = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()
    assert version == (index_module.SCHEMA_VERSION,)


def test_absolute_paths_under_a_backed_up_root_become_snapshot_names():
    roots = ["/home/me/docs", "/srv/docs", "/"]
    assert snapshot_paths(roots, ["/home/me/docs/a/b", "/srv/docs", "docs/x", "/etc/x"]) == \
        ["docs/a/b", "docs-1", "docs/x", "root/etc/x"]
