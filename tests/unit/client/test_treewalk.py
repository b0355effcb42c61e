"""Reading version-2 trees: directory by directory, damage reported by path
and skipped, cycles refused, and a diff that never opens unchanged subtrees."""
import pytest
from twisted.internet import defer

from flud.client.repository.blobs import BlobSealer
from flud.client.repository.tree_records import DirEntry, SmallRef, directory_records
from flud.client.repository.tree_walk import TreeReader
from flud.crypto import new_user_secret
from flud.errors import FludError

KEY = "ab" * 32


class Blobs:
    """Sealed blobs in memory, fetched as a node would hand them back."""

    def __init__(self):
        self.sealer = BlobSealer(new_user_secret())
        self.sealed = {}
        self.fetched = []
        self.missing = set()

    def store(self, entries):
        *rest, = directory_records(entries)
        more = tuple(self._put(r) for r in rest[1:])
        return self._put(rest[0]._replace(more=more))

    def _put(self, record):
        blob_id, sealed = self.sealer.seal(record.encode())
        self.sealed[blob_id.hex()] = sealed
        return blob_id.hex()

    def fetch(self, blob_id):
        self.fetched.append(blob_id)
        if blob_id in self.missing:
            return defer.fail(FludError("no holder answered"))
        return defer.succeed(self.sealed[blob_id])


def f(name, size=3):
    return DirEntry(name, "f", 0o100644, 1, size, SmallRef(KEY, "", KEY, 0, size) if size else None)


def d(name, ref, mtime=1):
    return DirEntry(name, "d", 0o40755, mtime, 0, ref)


def build(blobs, deep_files=("x",)):
    c = blobs.store([f(n) for n in deep_files])
    b = blobs.store([d("c", c), f("y")])
    return blobs.store([d("b", b), f("top"), DirEntry("ln", "l", 0o120777, 1, 3, "top")])


def walk(blobs, root, **kw):
    seen, damaged = [], []
    reader = TreeReader(blobs.fetch, blobs.sealer)
    d_ = reader.walk(root, lambda path, entry: seen.append(path), damaged.append, **kw)
    assert d_.called
    return seen, damaged


def test_a_walk_visits_every_path_depth_first():
    blobs = Blobs()
    seen, damaged = walk(blobs, build(blobs))
    assert seen == ["b", "b/c", "b/c/x", "b/y", "ln", "top"] and damaged == []


def test_a_walk_can_leave_out_subtrees_nobody_asked_for():
    blobs = Blobs()
    root = build(blobs)
    seen, _ = walk(blobs, root, wanted=lambda path: not path.startswith("b"))
    assert seen == ["ln", "top"] and len(blobs.fetched) == 1


@pytest.mark.parametrize("damage", ["flip", "missing", "short"])
def test_a_damaged_directory_is_reported_by_path_and_the_rest_goes_on(damage):
    blobs = Blobs()
    c = blobs.store([f("x")])
    b = blobs.store([d("c", c), f("y")])
    e = blobs.store([f("z")])
    root = blobs.store([d("b", b), d("e", e)])
    if damage == "flip":
        sealed = bytearray(blobs.sealed[b])
        sealed[5] ^= 1
        blobs.sealed[b] = bytes(sealed)
    elif damage == "missing":
        blobs.missing.add(b)
    else:
        blobs.sealed[b] = blobs.sealed[b][:-1]
    seen, damaged = walk(blobs, root)
    assert seen == ["b", "e", "e/z"]
    assert [x.path for x in damaged] == ["b"]


def test_a_large_directory_is_read_whole_from_its_continuation_records():
    blobs = Blobs()
    names = [f"f{i:05d}" for i in range(9000)]
    root = blobs.store([f(n) for n in names])
    seen, damaged = walk(blobs, root)
    assert seen == names and damaged == [] and len(blobs.fetched) == 3


class OpenSealer:
    """Records kept as they are, under ids the test picks: only a fake can
    make a cycle, since a real id is the hash of what the blob holds."""

    def open(self, blob_id, sealed):
        return sealed


def test_a_directory_that_contains_itself_is_refused():
    blobs = Blobs()
    blobs.sealer = OpenSealer()
    root_id, inner_id = "01" * 32, "02" * 32
    blobs.sealed = {root_id: directory_records([d("a", inner_id)])[0].encode(),
                    inner_id: directory_records([d("again", root_id), f("x")])[0].encode()}
    root = root_id
    seen, damaged = walk(blobs, root)
    assert seen == ["a", "a/again", "a/x"]
    assert [x.path for x in damaged] == ["a/again"] and "cycle" in damaged[0].why


def diff(blobs, old, new):
    changes, damaged = [], []
    reader = TreeReader(blobs.fetch, blobs.sealer)
    d_ = reader.diff(old, new, lambda change, path, a, b: changes.append((change, path)),
                     damaged.append)
    assert d_.called and damaged == []
    return changes


def test_diff_lists_what_was_added_removed_and_changed():
    blobs = Blobs()
    old = build(blobs, deep_files=("x", "gone"))
    c = blobs.store([f("x", 4), f("new")])
    b = blobs.store([d("c", c), f("y")])
    new = blobs.store([d("b", b), f("top"), DirEntry("ln", "l", 0o120777, 1, 3, "top")])
    assert diff(blobs, old, new) == [("-", "b/c/gone"), ("+", "b/c/new"), ("M", "b/c/x")]


def test_diff_never_opens_an_unchanged_subtree():
    blobs = Blobs()
    shared = blobs.store([f(f"n{i}") for i in range(50)])
    old = blobs.store([d("same", shared), f("a", 1)])
    new = blobs.store([d("same", shared), f("a", 2)])
    blobs.fetched.clear()
    assert diff(blobs, old, new) == [("M", "a")]
    assert shared not in blobs.fetched
    assert diff(blobs, old, old) == []
