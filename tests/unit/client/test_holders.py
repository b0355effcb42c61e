"""The holder map: pages that say where shares are, the newest page winning
for an object, merged into fewer pages without losing anything."""
import json

import pytest

from flud.client.repository.holder_map import (MAX_PAGES, HolderMap, MapIndex, MapTooLarge, MapPage, RootRecord,
                                 is_root_v1, merge)
from flud.client.records import Bundle, ShareHolder
from flud.client.repository.tree_records import BadRecord, BlobRef, NewerFormat


def hexid(i: int) -> str:
    return f"{i:064x}"


def bundle(i: int, node: int = 1) -> Bundle:
    return Bundle(1000, 2, 4, 500, tuple(ShareHolder(s, hexid(100 + s), hexid(node + s))
                                         for s in range(4)))


def extent(node: int) -> tuple:
    return tuple(ShareHolder(s, hexid(200 + s), hexid(node + s)) for s in range(4))


def blob(i: int, bundle_i: int = 1) -> BlobRef:
    return BlobRef(hexid(1000 + i), hexid(bundle_i), 100 * i, 100)


def test_a_page_round_trips_and_has_one_encoding():
    page = MapPage.of({hexid(2): bundle(2), hexid(1): bundle(1)}, {hexid(9): extent(5)},
                      [blob(2), blob(1)])
    again = MapPage.of({hexid(1): bundle(1), hexid(2): bundle(2)}, {hexid(9): extent(5)},
                       [blob(1), blob(2)])
    assert page.encode() == again.encode()
    assert MapPage.decode(page.encode()) == page and len(page) == 5


def test_the_newest_page_wins_for_an_object():
    old = MapPage.of({hexid(1): bundle(1, node=1), hexid(2): bundle(2)}, {hexid(9): extent(1)})
    repair = MapPage.of({hexid(1): bundle(1).moved(2, hexid(77))}, {hexid(9): extent(40)})
    holders = HolderMap([old, repair])
    assert holders.bundle(hexid(1)).holders[2].node == hexid(77)
    assert holders.bundle(hexid(2)) == bundle(2)
    assert holders.extent(hexid(9)) == extent(40)
    assert holders.bundle(hexid(3)) is None


def test_the_map_says_where_each_record_is():
    holders = HolderMap([MapPage.of(blobs=[blob(1), blob(2, bundle_i=5)])])
    assert holders.blob(hexid(1002)) == blob(2, bundle_i=5)
    assert holders.blob(hexid(1003)) is None


def test_merging_keeps_every_newest_holder_in_fewer_pages():
    pages = [MapPage.of({hexid(i): bundle(i, node=i)}, blobs=[blob(i)]) for i in range(50)]
    pages.append(MapPage.of({hexid(7): bundle(7, node=99)}))
    merged = merge(pages, rows=16)
    assert len(merged) == 7 and sum(len(p) for p in merged) == 100
    assert HolderMap(merged).blob(hexid(1049)) == blob(49)
    assert HolderMap(merged).bundle(hexid(7)) == bundle(7, node=99)
    for i in range(50):
        assert HolderMap(merged).bundle(hexid(i)) == HolderMap(pages).bundle(hexid(i))


@pytest.mark.parametrize("mutate", [
    lambda v: v["b"].reverse(),                          # not sorted
    lambda v: v["b"].append(v["b"][0]),                  # repeated id
    lambda v: v["b"][0].__setitem__(0, "zz"),            # not an id
    lambda v: v["b"][0][1].__setitem__("k", 9),          # k > n
    lambda v: v["b"][0][1].pop("bl"),                    # missing field
    lambda v: v["x"][0][1][0].__setitem__(2, 5),         # a node that is not an id
    lambda v: v.__setitem__("x", {}),                    # wrong shape
    lambda v: v["r"].reverse(),                          # blobs not sorted
    lambda v: v["r"][0].__setitem__(2, -5),              # a bad range
    lambda v: v.pop("r"),                                # no blob section
])
def test_a_malformed_page_is_refused(mutate):
    page = MapPage.of({hexid(1): bundle(1), hexid(2): bundle(2)}, {hexid(9): extent(1)},
                      [blob(1), blob(2)])
    value = json.loads(page.encode())
    mutate(value)
    with pytest.raises(BadRecord):
        MapPage.decode(json.dumps(value).encode())


def test_a_map_index_round_trips_and_is_bounded():
    ref = BlobRef(hexid(1), hexid(2), 0, 10)
    index = MapIndex(((ref, bundle(2)), (ref._replace(offset=10), bundle(2))),
                     snapshots=(hexid(7), hexid(8)),
                     v1=({"id": 1, "created": 5.0, "manifest": {"size": 1, "segs": []}},))
    assert MapIndex.decode(index.encode()) == index
    with pytest.raises(BadRecord):
        MapIndex.decode(index.encode().replace(hexid(7).encode(), b"nothex"))
    most = MapIndex(((ref, bundle(2)),) * MAX_PAGES)
    assert len(MapIndex.decode(most.encode()).pages) == MAX_PAGES
    # One page more: decode refuses it, and so does encode (a head nothing
    # could open is never written).
    with pytest.raises(MapTooLarge):
        MapIndex(((ref, bundle(2)),) * (MAX_PAGES + 1)).encode()
    value = json.loads(most.encode())
    value["pages"].append(value["pages"][0])
    with pytest.raises(BadRecord):
        MapIndex.decode(json.dumps(value).encode())
    with pytest.raises(NewerFormat):
        MapIndex.decode(b'{"v":3,"t":"map","pages":[]}')


def root(**changes):
    fields = dict(snapshot=blob(1, bundle_i=3), map_index=blob(2, bundle_i=3),
                  bundles=((hexid(3), bundle(3)),))
    fields.update(changes)
    return RootRecord(**fields)


def test_a_root_record_round_trips_and_fits_a_root_put():
    record = root()
    assert RootRecord.decode(record.encode()) == record
    assert len(record.encode()) < 2048   # ROOT_PUT takes up to 64 KiB


def test_a_root_record_must_locate_its_own_blobs():
    with pytest.raises(BadRecord, match="its own bundles"):
        RootRecord.decode(root(bundles=((hexid(4), bundle(4)),)).encode())


@pytest.mark.parametrize("data", [
    b"nope", b"[]", b'{"snapshot": 3, "manifest": {}}', b'{"v": 1, "t": "root", "bundles": []}',
    b'{"v": 2, "t": "root", "bundles": {}}', b'{"v": 2, "t": "map", "bundles": []}',
])
def test_what_is_not_a_version_2_root_record_is_refused(data):
    with pytest.raises(BadRecord):
        RootRecord.decode(data)


def test_a_newer_root_record_says_to_upgrade_and_a_version_1_one_is_recognised():
    with pytest.raises(NewerFormat, match="upgrade flud"):
        RootRecord.decode(b'{"v": 3, "t": "root", "bundles": []}')
    assert is_root_v1({"snapshot": 3, "manifest": {"size": 1, "segs": []}, "created": 1.0})
    assert not is_root_v1(json.loads(root().encode()))


def test_a_map_index_says_how_many_of_its_pages_a_merge_wrote():
    ref = BlobRef(hexid(1), hexid(2), 0, 10)
    pages = tuple((ref._replace(offset=i), bundle(2)) for i in range(3))
    index = MapIndex(pages, merged=2)
    assert MapIndex.decode(index.encode()) == index and index.appended() == 1
    assert b'"m"' not in MapIndex(pages).encode()    # an index without a merge: as before
    value = json.loads(index.encode())
    value["m"] = 4                                     # more merged pages than pages
    with pytest.raises(BadRecord, match="merged"):
        MapIndex.decode(json.dumps(value).encode())


def test_a_dropped_row_hides_every_older_row_of_its_id_and_merges_away(tmp_path):
    """Prune drops the rows into what it is about to delete with a page of
    their ids (issue 25, a prune killed between its DELETEs and its map)."""
    from flud.client.repository.reader import MapCache

    old = MapPage.of({hexid(1): bundle(1)}, blobs=[blob(1), blob(2)])
    drop = MapPage(dropped=(hexid(1001),))
    assert MapPage.decode(drop.encode()) == drop
    assert b'"d"' not in old.encode()           # pages without keep their encoding
    assert HolderMap([old, drop]).blob(hexid(1001)) is None
    assert HolderMap([old, drop]).blob(hexid(1002)) == blob(2)
    assert all(not page.dropped for page in merge([old, drop]))
    assert [ref.blob_id for page in merge([old, drop]) for ref in page.blobs] == [hexid(1002)]
    cache = MapCache(str(tmp_path))
    try:
        cache.add_older(page=drop)                  # read newest first, as a reader does
        cache.add_older(page=old)
        assert cache.blob(hexid(1001)) is None and cache.blob(hexid(1002)) == blob(2)
        assert [ref.blob_id for ref in cache.blob_rows()] == [hexid(1002)]
    finally:
        cache.close()
    newer = MapPage.of(blobs=[blob(1, bundle_i=3)])  # a newer row of the id holds again
    assert HolderMap([old, drop, newer]).blob(hexid(1001)) == blob(1, bundle_i=3)
    for bad in ([hexid(2), hexid(1)], [hexid(1), hexid(1)], ["xyz"]):
        value = json.loads(drop.encode())
        value["d"] = bad
        with pytest.raises(BadRecord):
            MapPage.decode(json.dumps(value).encode())
    with pytest.raises(BadRecord):               # an id cannot be both dropped and a row
        MapPage(blobs=(blob(1),), dropped=(hexid(1001),)).encode()


def test_a_repair_root_ranks_above_what_it_repaired_and_below_a_newer_generation():
    """check --repair hearing fewer than a majority writes the same
    generation with one repair more (issue 25, seed 70002)."""
    from flud.client.repository.root_store import _root_rank
    plain = root(generation=5, home="a" * 32)
    assert b'"rep"' not in plain.encode()            # a root without keeps its encoding
    repaired = plain._replace(repairs=1, prev=plain.digest())
    assert RootRecord.decode(repaired.encode()) == repaired
    newer = root(generation=6, home="b" * 32)
    assert _root_rank(plain) < _root_rank(repaired) < _root_rank(newer)
    assert repaired.successor("a" * 32).repairs == 0
    value = json.loads(repaired.encode())
    value["rep"] = -1
    with pytest.raises(BadRecord):
        RootRecord.decode(json.dumps(value).encode())
