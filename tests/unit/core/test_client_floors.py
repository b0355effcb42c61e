"""The client's import floors (tools/house_shape.py, issue 26) do not grow
back: 11 before the re-layering, 8 since the record format, the sealed
JSON opener and the listing fingerprint moved down; no circles."""
from tools import house_shape

MAX_FLOORS = 8


def test_the_client_has_at_most_max_floors_and_no_circle():
    graph = house_shape.import_graph(house_shape.modules_under("flud.client"))
    floor = house_shape.floors(graph)
    highest = max(floor.values())
    top = sorted(m for m, f in floor.items() if f == highest)
    assert highest + 1 <= MAX_FLOORS, f"{highest + 1} import floors; on top: {top}"
    assert all(len(c) == 1 for c in house_shape.strongly_connected(graph))


def test_the_repository_record_readers_sit_low():
    """The holder map and the version-1 reader import no reader of trees:
    what the repository's heads and lookups stand on stays two floors up."""
    graph = house_shape.import_graph(house_shape.modules_under("flud.client"))
    floor = house_shape.floors(graph)
    for name in ("repository.holder_map", "repository.version1_reader",
                 "repository.tree_records"):
        assert floor["flud.client." + name] <= 2, name
