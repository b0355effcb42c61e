"""The holder map of a version-2 repository (docs/snapshots.md): where every
bundle's and extent's shares are, and which bundle range holds each record's
blob, apart from the tree records that say what a snapshot holds.

Repair moves shares and prune drops them; neither touches a tree record,
because nothing in a tree says which node holds what. The map is a list of
pages, each a sealed blob: a backup appends a page of what it stored, repair
a page of what it moved, and for an object the newest page wins. merge()
folds pages into fewer (the map index lists at most MAX_PAGES).
"""
import hashlib
import json
from typing import NamedTuple, Tuple

from flud.client.records import BadRecord, BlobRef, Bundle, ShareHolder, is_hex
from flud.client.repository.record_format import FORMAT_VERSION, record_head
from flud.errors import FludError

MAX_PAGES = 4096   # the index stays one blob of at most ~5 MB; writers merge pages long before
PAGE_ROWS = 4096   # objects per page when pages are merged

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


def _holders(rows) -> Tuple[ShareHolder, ...]:
    if type(rows) is not list:
        raise BadRecord("a holder list that is not a list")
    holders = []
    for row in rows:
        if not (type(row) is list and len(row) == 3 and type(row[0]) is int and row[0] >= 0
                and is_hex(row[1]) and is_hex(row[2])):
            raise BadRecord("a bad share holder")
        holders.append(ShareHolder(*row))
    return tuple(holders)


def _bundle(row) -> Bundle:
    if type(row) is not dict:
        raise BadRecord("a bundle that is not an object")
    try:
        bundle = Bundle(row["len"], row["k"], row["n"], row["bl"], _holders(row["shares"]))
    except KeyError as err:
        raise BadRecord(f"a bundle without {err.args[0]!r}") from None
    if not all(type(v) is int and v > 0 for v in bundle[:4]) or bundle.k > bundle.n:
        raise BadRecord("a bundle with a bad geometry")
    return bundle


class MapPage(NamedTuple):
    """Bundles (id -> Bundle), extents (id -> their share holders) and blobs
    (id -> BlobRef: which bundle range holds a record), each sorted by id so
    a page has one encoding."""
    bundles: tuple = ()
    extents: tuple = ()
    blobs: tuple = ()
    challenges: tuple = ()   # ((share key, [challenge as written]), ...): VERIFY from the key alone
    # blob ids whose older rows no longer hold (prune drops the rows into
    # what it is about to delete before its first DELETE): a reader takes
    # them as having no row, and a merge leaves both out
    dropped: tuple = ()

    @classmethod
    def of(cls, bundles=None, extents=None, blobs=(), challenges=()) -> "MapPage":
        return cls(tuple(sorted((bundles or {}).items())), tuple(sorted((extents or {}).items())),
                   tuple(sorted(blobs)), tuple(sorted(challenges)))

    def __len__(self) -> int:
        return len(self.bundles) + len(self.extents) + len(self.blobs)

    def split(self, rows: int = PAGE_ROWS) -> list:
        """The same rows as pages of at most `rows` objects each (a share's
        challenges go with whatever page has room)."""
        items = ([("b", row) for row in self.bundles] + [("x", row) for row in self.extents]
                 + [("r", row) for row in self.blobs])
        pages = []
        for start in range(0, max(len(items), 1), rows):
            chunk = items[start:start + rows]
            pages.append(MapPage(tuple(r for kind, r in chunk if kind == "b"),
                                 tuple(r for kind, r in chunk if kind == "x"),
                                 tuple(r for kind, r in chunk if kind == "r")))
        per_page = -(-len(self.challenges) // len(pages))
        # (not _replace: it checks len(), which counts objects here)
        return [MapPage(page.bundles, page.extents, page.blobs,
                        self.challenges[i * per_page:(i + 1) * per_page])
                for i, page in enumerate(pages)]

    def encode(self) -> bytes:
        value = {
            "v": FORMAT_VERSION, "t": "holders",
            "b": [[bid, bundle.to_wire()] for bid, bundle in self.bundles],
            "x": [[xid, [h.to_wire() for h in holders]] for xid, holders in self.extents],
            "r": [ref.to_wire() for ref in self.blobs],
            "c": [[key, list(items)] for key, items in self.challenges],
        }
        if self.dropped:   # (a page without keeps the encoding it always had)
            if list(self.dropped) != sorted(set(self.dropped)) or \
                    set(self.dropped) & {ref.blob_id for ref in self.blobs}:
                raise BadRecord("a holder page's dropped ids must be sorted, unique and "
                                "have no row of their own in it")
            value["d"] = list(self.dropped)
        return _encode(value).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> "MapPage":
        value = record_head(data, "holders")
        bundles, extents, blobs = value.get("b"), value.get("x"), value.get("r")
        if type(bundles) is not list or type(extents) is not list or type(blobs) is not list:
            raise BadRecord("a holder page of the wrong shape")
        pairs = []
        for rows, make in ((bundles, _bundle), (extents, _holders)):
            made = []
            for row in rows:
                if not (type(row) is list and len(row) == 2 and is_hex(row[0])):
                    raise BadRecord("a holder page row of the wrong shape")
                made.append((row[0], make(row[1])))
            ids = [i for i, _ in made]
            if ids != sorted(set(ids)):
                raise BadRecord("a holder page whose ids are not sorted, or repeat")
            pairs.append(tuple(made))
        refs = tuple(BlobRef.from_wire(row) for row in blobs)
        ids = [ref.blob_id for ref in refs]
        if ids != sorted(set(ids)):
            raise BadRecord("a holder page whose blob ids are not sorted, or repeat")
        challenges = value.get("c", [])
        if type(challenges) is not list or not all(
                type(row) is list and len(row) == 2 and is_hex(row[0]) and type(row[1]) is list
                for row in challenges):
            raise BadRecord("a holder page with bad challenges")
        dropped = value.get("d", [])
        if type(dropped) is not list or not all(is_hex(d) for d in dropped) \
                or dropped != sorted(set(dropped)) or set(dropped) & set(ids):
            raise BadRecord("a holder page with bad dropped rows")
        return cls(*pairs, refs, tuple((key, tuple(items)) for key, items in challenges),
                   tuple(dropped))


class HolderMap:
    """The newest holders of every object, from pages oldest first."""

    def __init__(self, pages=()):
        self._bundles, self._extents, self._blobs = {}, {}, {}
        for page in pages:
            self.add(page)

    def add(self, page: MapPage) -> None:
        self._bundles.update(page.bundles)
        self._extents.update(page.extents)
        self._blobs.update((ref.blob_id, ref) for ref in page.blobs)
        for blob_id in page.dropped:
            self._blobs.pop(blob_id, None)

    def blob(self, blob_id: str) -> BlobRef:
        """Where a record's blob is (its bundle and range), or None."""
        return self._blobs.get(blob_id)

    def bundle(self, bundle_id: str) -> Bundle:
        return self._bundles.get(bundle_id)

    def extent(self, extent_id: str) -> tuple:
        return self._extents.get(extent_id)

    def __len__(self) -> int:
        return len(self._bundles) + len(self._extents) + len(self._blobs)

    def pages(self, rows: int = PAGE_ROWS) -> list:
        """The whole map as pages of at most `rows` objects (what merging
        writes back)."""
        if not len(self):
            return []
        return MapPage.of(self._bundles, self._extents, self._blobs.values()).split(rows)


def merge(pages, rows: int = PAGE_ROWS) -> list:
    """Fewer pages holding the same newest holders (pages oldest first)."""
    return HolderMap(pages).pages(rows)


class MapTooLarge(FludError):
    """A map index with more pages than any reader opens: refused when
    written, never stored as a head nothing can read."""

    code = "MAP_TOO_LARGE"


class MapIndex(NamedTuple):
    """The repository's head: the map's pages (each a blob, with the record
    of the bundle that holds it, so any page is found from the index alone),
    the snapshots kept (their records' blob ids, oldest first: forget drops
    one by writing an index without it), and the version-1 snapshots made
    before (id, created, manifest ref: listed and restored as before).
    merged: how many of the first pages are a merge's output (full pages:
    merging them again gains nothing; the pages after them were appended
    since, and those are what a writer counts before it merges)."""
    pages: Tuple[Tuple[BlobRef, Bundle], ...] = ()
    snapshots: Tuple[str, ...] = ()
    v1: tuple = ()
    merged: int = 0

    def encode(self) -> bytes:
        if len(self.pages) > MAX_PAGES:   # decode would refuse it: so does the writer
            raise MapTooLarge(f"a map index of {len(self.pages)} pages (at most {MAX_PAGES} "
                              f"can be read): its pages must be merged first")
        value = {"v": FORMAT_VERSION, "t": "map",
                 "pages": [[ref.to_wire(), bundle.to_wire()] for ref, bundle in self.pages],
                 "snapshots": list(self.snapshots), "v1": list(self.v1)}
        if self.merged:
            value["m"] = self.merged
        return _encode(value).encode("ascii")

    def appended(self) -> int:
        """Pages appended since the last merge."""
        return len(self.pages) - self.merged

    @classmethod
    def decode(cls, data: bytes) -> "MapIndex":
        value = record_head(data, "map")
        pages, snapshots, v1 = value.get("pages"), value.get("snapshots"), value.get("v1", [])
        if type(pages) is not list or len(pages) > MAX_PAGES:
            raise BadRecord(f"a map index that is not a list of at most {MAX_PAGES} pages")
        if type(snapshots) is not list or not all(is_hex(s) for s in snapshots):
            raise BadRecord("a map index with a bad snapshot list")
        if type(v1) is not list or not all(type(s) is dict for s in v1):
            raise BadRecord("a map index with a bad version-1 history")
        located = []
        for row in pages:
            if not (type(row) is list and len(row) == 2):
                raise BadRecord("a map index page of the wrong shape")
            ref = BlobRef.from_wire(row[0])
            located.append((ref, _bundle(row[1])))
        merged = value.get("m", 0)
        if type(merged) is not int or not 0 <= merged <= len(located):
            raise BadRecord("a map index with a bad count of merged pages")
        return cls(tuple(located), tuple(snapshots), tuple(v1), merged)


class RootRecord(NamedTuple):
    """What ROOT_PUT keeps for this owner (docs/snapshots.md): where the
    newest snapshot record and the map index are, and the holders of the
    bundles that hold them (the map cannot locate itself).

    The chain (a head never goes back): `home` is the writer's home id
    (made at init, kept in the home), `prev` the digest of the root this
    one replaced, `last_id` the highest snapshot id the repository has
    issued. Roots written before the chain have them empty (""/0).

    `repairs`: how many repair pages `check --repair` added to this
    generation while it heard fewer than a majority of the root's holders
    (client/repository/head.py write_head). Such a root keeps its generation
    and ranks just above the one it repaired, below any newer generation:
    a check that read a stale head (another home took over on the holders
    it could not hear) cannot outrank or fork the newer head.

    `holder_set`: the node ids (hex, sorted) of the root's home set when
    it was written (root_store.root_holders), the set whose majority the
    writer heard. A reader needs a majority of this set too, not only of
    the set as it is now: a node that joined since (one whose disk was lost
    replaced by an empty one) says nothing about a root written before it
    came, and counting it let a replaced home miss a handover that reached
    a bare majority (docs/snapshots.md, "Root record"). Roots from before
    it have none (()) and are read as before."""
    snapshot: BlobRef
    map_index: BlobRef
    bundles: tuple   # ((bundle id, Bundle), ...) sorted by id
    generation: int = 0   # one more each time the repository's head changes: the newest wins
    home: str = ""
    prev: str = ""
    last_id: int = 0
    repairs: int = 0
    holder_set: tuple = ()

    def encode(self) -> bytes:
        value = {"v": FORMAT_VERSION, "t": "root", "snapshot": self.snapshot.to_wire(),
                 "map": self.map_index.to_wire(),
                 "bundles": [[bid, b.to_wire()] for bid, b in self.bundles],
                 "gen": self.generation}
        if self.home or self.prev or self.last_id:   # a pre-chain root keeps its encoding
            value.update(home=self.home, prev=self.prev, sid=self.last_id)
        if self.repairs:
            value["rep"] = self.repairs
        if self.holder_set:
            value["hs"] = list(self.holder_set)
        return _encode(value).encode("ascii")

    def digest(self) -> str:
        """What the next root names as `prev`: a hash of this one's encoding
        (the sealed form has a random nonce; the encoding is canonical)."""
        return hashlib.sha256(self.encode()).hexdigest()

    def successor(self, home: str, **fields) -> "RootRecord":
        """The root one generation newer (or `generation`), written by
        `home`, chained to this one."""
        fields.setdefault("generation", self.generation + 1)
        fields.setdefault("repairs", 0)
        return self._replace(home=home, prev=self.digest(), **fields)

    @classmethod
    def decode(cls, data: bytes) -> "RootRecord":
        """A version-2 root record; a version-1 one ({"snapshot": N,
        "manifest": ...}, no "v") is the caller's to read as before."""
        value = record_head(data, "root")
        rows = value.get("bundles")
        if type(rows) is not list:
            raise BadRecord("a root record without its bundles")
        bundles = []
        for row in rows:
            if not (type(row) is list and len(row) == 2 and is_hex(row[0])):
                raise BadRecord("a root record's bundle of the wrong shape")
            bundles.append((row[0], _bundle(row[1])))
        located = {ref_bundle for ref_bundle, _ in bundles}
        snapshot = BlobRef.from_wire(value.get("snapshot"))
        map_index = BlobRef.from_wire(value.get("map"))
        if snapshot.bundle not in located or map_index.bundle not in located:
            raise BadRecord("a root record that does not say where its own bundles are")
        generation = value.get("gen", 0)
        if type(generation) is not int or generation < 0:
            raise BadRecord("a root record with a bad generation")
        home, prev, last_id = value.get("home", ""), value.get("prev", ""), value.get("sid", 0)
        if not ((home == "" or is_hex(home, HOME_ID_HEX)) and (prev == "" or is_hex(prev))
                and type(last_id) is int and last_id >= 0):
            raise BadRecord("a root record with a bad chain (home, prev or sid)")
        repairs = value.get("rep", 0)
        if type(repairs) is not int or repairs < 0:
            raise BadRecord("a root record with a bad count of repairs")
        holder_set = value.get("hs", [])
        if not (type(holder_set) is list and len(holder_set) <= MAX_HOLDER_SET
                and all(_is_node_hex(node) for node in holder_set)):
            raise BadRecord("a root record with a bad holder set")
        return cls(snapshot, map_index, tuple(sorted(bundles)), generation, home, prev, last_id,
                   repairs, tuple(sorted(holder_set)))


MAX_HOLDER_SET = 256   # a root's home set is n + 2 nodes; n is at most 255 (zfec)


def _is_node_hex(value) -> bool:
    return type(value) is str and 2 <= len(value) <= 128 and len(value) % 2 == 0 and \
        is_hex(value, len(value))


HOME_ID_HEX = 32   # a home id: 16 random bytes, in hex


def is_root_v1(value) -> bool:
    """A version-1 root record (a manifest's), as find_root reads it today."""
    return type(value) is dict and "v" not in value and "manifest" in value
