"""The client's import floors (tools/house_shape.py, issue 26) do not grow
back: 11 before the re-layering, 8 since the record format, the sealed
JSON opener and the listing fingerprint moved down, 7 since taking the
nodes' head (head_adopt.py) left the head's writers, 6 since the record
formats and the bundle sender stand on nothing above the records (their
errors in flud/errors.py, record_sender and tar_challenges beside the
sender); no circles."""
import pytest

from tools import house_shape

MAX_FLOORS = 6


@pytest.fixture(scope="module")
def shape():
    graph = house_shape.import_graph(house_shape.modules_under("flud.client"))
    return graph, house_shape.floors(graph)


def test_the_client_has_at_most_max_floors_and_no_circle(shape):
    graph, floor = shape
    highest = max(floor.values())
    top = sorted(m for m, f in floor.items() if f == highest)
    assert highest + 1 <= MAX_FLOORS, f"{highest + 1} import floors; on top: {top}"
    assert all(len(c) == 1 for c in house_shape.strongly_connected(graph))


def test_the_repository_record_readers_sit_low(shape):
    """The holder map, the tree records and the version-1 reader stand on
    nothing that reads trees: what the heads and lookups stand on stays low."""
    _, floor = shape
    for name in ("repository.holder_map", "repository.version1_reader",
                 "repository.tree_records"):
        assert floor["flud.client." + name] <= 2, name


def test_the_head_and_the_bundle_sender_sit_below_the_jobs(shape):
    """Every job writes the head and sends bundles: those stand on the
    record modules and the reader alone (head.py imports neither the
    repository lookup nor the sender)."""
    _, floor = shape
    assert floor["flud.client.repository.head"] <= 3
    assert floor["flud.client.repository.bundle_sender"] <= 2
    assert floor["flud.client.repository.record_format"] == 0
