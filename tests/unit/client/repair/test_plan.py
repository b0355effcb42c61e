from flud.client.repository.holder_map import HolderMap, MapPage
from flud.client.records import Bundle, ShareHolder
from flud.client.repair.object_health import StoredObject
from flud.client.repair.repair_plan import (
    by_node, map_page, objects_from_map, place)


def moved_rows(placements) -> dict:
    """{object id: [(index, share key, new node)]}, what the caller records."""
    rows = {}
    for p in placements:
        rows.setdefault(p.object_id, []).append((p.index, p.key, p.node))
    return {oid: sorted(r) for oid, r in rows.items()}


def hexid(i: int) -> str:
    return f"{i:064x}"


def _object(oid, nodes, n=8):
    return StoredObject(hexid(oid), "bundle", 4, n,
                        tuple(ShareHolder(i, hexid(1000 * oid + i), hexid(nodes[i]))
                              for i in range(n)), 100)


def test_new_holders_hold_no_share_of_the_object_and_fill_the_least_loaded_first():
    obj = _object(1, list(range(1, 9)))
    candidates = [hexid(i) for i in range(1, 13)]          # 9..12 hold nothing of it
    load = {hexid(9): 5, hexid(10): 0, hexid(11): 2, hexid(12): 0}
    placed, unplaced = place([(obj, [2, 5])], candidates, load)
    assert unplaced == []
    assert {p.node for p in placed} == {hexid(10), hexid(12)}
    assert [p.key for p in placed] == [hexid(1002), hexid(1005)]
    assert load[hexid(10)] == 1 and load[hexid(12)] == 1


def test_two_lost_shares_of_one_object_never_share_a_node_and_shortage_is_reported():
    obj = _object(1, list(range(1, 9)))
    placed, unplaced = place([(obj, [0, 1, 2])], [hexid(i) for i in range(1, 11)], {})
    assert len({p.node for p in placed}) == 2 and unplaced == [(hexid(1), 2)]


def test_nodes_to_avoid_for_an_object_are_skipped():
    obj = _object(1, list(range(1, 9)))
    placed, _ = place([(obj, [0])], [hexid(9), hexid(10)], {}, avoid={hexid(1): {hexid(9)}})
    assert placed[0].node == hexid(10)


def test_the_plan_is_deterministic_and_spreads_over_many_objects():
    objects = [_object(o, [(o + i) % 20 + 1 for i in range(8)]) for o in range(1, 41)]
    candidates = [hexid(i) for i in range(1, 31)]
    a, _ = place([(o, [0]) for o in objects], candidates, {})
    b, _ = place([(o, [0]) for o in objects], candidates, {})
    assert a == b
    counts = {}
    for p in a:
        counts[p.node] = counts.get(p.node, 0) + 1
    assert max(counts.values()) - min(counts.values()) <= 1   # least loaded first
    grouped = by_node(a)
    assert sum(len(v) for v in grouped.values()) == 40
    assert all(p.node == node for node, ps in grouped.items() for p in ps)


def test_holder_map_in_and_repair_page_out():
    bundle = Bundle(1000, 4, 8, 250, tuple(ShareHolder(i, hexid(100 + i), hexid(1 + i))
                                           for i in range(8)))
    extent = tuple(ShareHolder(i, hexid(200 + i), hexid(1 + i)) for i in range(8))
    hmap = HolderMap([MapPage.of({hexid(1): bundle}, {hexid(2): extent})])
    objects = {o.object_id: o for o in objects_from_map(hmap, extent_k=4)}
    assert objects[hexid(1)].kind == "bundle" and objects[hexid(1)].share_length == 250
    assert objects[hexid(2)].kind == "extent" and (objects[hexid(2)].k,
                                                   objects[hexid(2)].n) == (4, 8)
    placed, _ = place([(objects[hexid(1)], [3]), (objects[hexid(2)], [0, 7])],
                      [hexid(50), hexid(51)], {})
    rows = moved_rows(placed)
    page = map_page(hmap, rows)
    after = HolderMap([MapPage.of({hexid(1): bundle}, {hexid(2): extent}), page])
    assert after.bundle(hexid(1)).holders[3] == ShareHolder(3, hexid(103), placed[0].node)
    assert after.bundle(hexid(1)).holders[2] == bundle.holders[2]
    assert [h.node for h in after.extent(hexid(2))][1:7] == [h.node for h in extent][1:7]
    assert {after.extent(hexid(2))[0].node, after.extent(hexid(2))[7].node} == {hexid(50),
                                                                              hexid(51)}
    # moves a killed check left for an object prune has deleted since: nothing to write
    assert map_page(hmap, {hexid(9): [(0, hexid(1), hexid(2))]}) == MapPage.of({}, {})


def test_an_extents_stream_length_is_the_sum_of_its_segments_block_lengths():
    from flud.client.records import Extent, ExtentSegment
    from flud.client.records import stream_length
    holders = tuple(ShareHolder(i, hexid(200 + i), hexid(1 + i)) for i in range(8))
    extent = Extent(holders, (ExtentSegment(hexid(1), 2 << 20, 512 << 10, ""),
                              ExtentSegment(hexid(2), 1000, 250, "")))
    assert stream_length(extent) == (512 << 10) + 250
    hmap = HolderMap([MapPage.of({}, {hexid(2): holders})])
    [obj] = objects_from_map(hmap, 4, {hexid(2): stream_length(extent)})
    assert obj.share_length == (512 << 10) + 250


def test_with_groups_a_host_takes_one_share_of_an_object_and_weighs_its_ids_load():
    obj = _object(1, list(range(1, 9)))
    groups = {hexid(i): f"host{i}" for i in range(1, 9)}
    groups.update({hexid(i): "sybil" for i in range(20, 30)})       # one host, ten ids
    groups.update({hexid(9): "host1", hexid(10): "host10", hexid(11): "host11"})
    candidates = [hexid(i) for i in list(range(9, 12)) + list(range(20, 30))]
    load = {hexid(20): 3, hexid(10): 1, hexid(11): 2}      # the Sybil's other ids: 0 each
    placed, unplaced = place([(obj, [2, 5])], candidates, load, groups=groups)
    nodes = [p.node for p in placed]
    assert hexid(9) not in nodes                  # host1 still holds share 0
    # the Sybil host holds 3 (on one id): its idle ids do not make it idle
    assert set(nodes) == {hexid(10), hexid(11)} and unplaced == []
    placed, _ = place([(_object(2, list(range(1, 9))), [0, 1, 2])], candidates, load,
                      groups=groups)
    assert sum(1 for p in placed if groups[p.node] == "sybil") == 1   # one host, one share
