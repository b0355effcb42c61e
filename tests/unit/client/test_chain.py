"""The chain of root records (client/repository/head_chain.py, holders.RootRecord): who
may write the next head, decided without I/O; the home id; old roots."""
import json
import os

import pytest

from flud.client.repository.head_chain import (AHEAD, FIRST, LEGACY, SAME, ForkedHead, OtherWriter,
                               StaleRoot, judge)
from flud.client.repository.holder_map import RootRecord
from flud.client.home import ClientHome, HomeError, create_home
from flud.client.repository.tree_records import BadRecord
from tests.unit.client.test_holders import root

ME, OTHER = "a1" * 16, "b2" * 16


def chain(length, home=ME):
    """Roots of generations 1..length, each chained to the one before."""
    roots = [root(generation=1, home=home)]
    while len(roots) < length:
        roots.append(roots[-1].successor(home))
    return roots


def test_a_root_names_its_writer_and_the_root_it_replaced():
    first, second = chain(2)
    assert second.generation == 2 and second.home == ME and second.prev == first.digest()
    assert RootRecord.decode(second.encode()) == second
    with pytest.raises(BadRecord, match="chain"):
        RootRecord.decode(second.encode().replace(ME.encode(), b"not-hex"))


def test_a_root_from_before_the_chain_reads_and_keeps_its_encoding():
    old = {"v": 2, "t": "root", "snapshot": [("1" * 64), "3" * 64, 0, 10],
           "map": ["2" * 64, "3" * 64, 10, 10],
           "bundles": [["3" * 64, {"len": 20, "k": 1, "n": 2, "bl": 20, "shares": []}]],
           "gen": 7}
    data = json.dumps(old, separators=(",", ":")).encode()
    record = RootRecord.decode(data)
    assert (record.home, record.prev, record.last_id, record.generation) == ("", "", 0, 7)
    assert record.encode() == data


def test_the_same_root_writes_on_and_a_first_one_needs_nothing():
    first, second = chain(2)
    assert judge(2, second, second, ME) == SAME
    assert judge(0, None, None, ME) == FIRST


def test_an_older_root_or_none_at_all_is_stale():
    first, second = chain(2)
    with pytest.raises(StaleRoot, match="generation 1"):
        judge(2, second, first, ME)
    with pytest.raises(StaleRoot, match="no root record"):
        judge(2, second, None, ME)
    with pytest.raises(StaleRoot, match="version-1"):
        judge(2, second, {"snapshot": 3, "manifest": {}}, ME)


def test_this_homes_own_next_root_is_taken():
    first, second = chain(2)
    assert judge(1, first, second, ME) == AHEAD


def test_a_fork_is_refused():
    first, second = chain(2)
    beside = first.successor(ME, last_id=9)      # another generation 2
    with pytest.raises(ForkedHead, match="another head of generation 2"):
        judge(2, second, beside, ME)
    third = chain(3)[2]                           # this home's, but not after what it saved
    with pytest.raises(ForkedHead, match="does not follow"):
        judge(1, root(generation=1, home=ME, last_id=5), third, ME)


def test_another_homes_newer_root_is_refused_with_the_way_to_hand_over():
    first, second = chain(2)
    theirs = second.successor(OTHER)
    with pytest.raises(OtherWriter, match="flud adopt --home /h") as err:
        judge(2, second, theirs, ME, "/h")
    assert err.value.code == "OTHER_WRITER"
    # a home with no head of its own (made from the key) does not write either
    with pytest.raises(OtherWriter, match="has written nothing yet"):
        judge(0, None, second, OTHER, "/h")
    # unless the root is its own (it lost its index, not its id)
    assert judge(0, None, second, ME) == AHEAD


def test_a_head_saved_before_the_chain_is_compared_by_generation():
    old = root(generation=4)
    assert judge(4, None, old, ME) == LEGACY
    assert judge(4, None, old.successor(ME), ME) == LEGACY
    with pytest.raises(StaleRoot):
        judge(5, None, old, ME)
    with pytest.raises(OtherWriter):
        judge(4, None, old.successor(OTHER), ME)


def test_a_home_keeps_one_id_and_a_home_from_the_key_gets_another(tmp_path):
    home = create_home(str(tmp_path / "a"), join=("127.0.0.1", 1))
    again = ClientHome(home.path)
    assert again.home_id == home.home_id and len(home.home_id) == 32
    other = create_home(str(tmp_path / "b"), join=("127.0.0.1", 1), identity=home.identity,
                        secret=home.secret)
    assert other.home_id != home.home_id
    os.unlink(os.path.join(home.path, "home.id"))     # a home made before ids: one now
    made = ClientHome(home.path).home_id
    assert made != home.home_id and ClientHome(home.path).home_id == made
    with open(os.path.join(home.path, "home.id"), "w") as f:
        f.write("damaged")
    with pytest.raises(HomeError, match="damaged"):
        ClientHome(home.path).home_id
