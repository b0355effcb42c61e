"""Placement a single host or operator cannot capture (flud/trust/placement_rules.py)."""
import os
from collections import Counter

import pytest

from flud.trust.placement_rules import (
    LOOPBACK_GROUP, Candidate, PlacementPolicy, choose, diversity_group,
    is_loopback_net, most_per_host, unvetted_slots)


def _ids(count, seed=0):
    return [bytes([seed, i % 256, i // 256]) + bytes(29) for i in range(count)]


def test_groups_are_ipv4_slash_24_ipv6_slash_48_and_loopback_as_one():
    assert diversity_group("203.0.113.7") == diversity_group("203.0.113.250") == "203.0.113.0/24"
    assert diversity_group("203.0.114.7") != diversity_group("203.0.113.7")
    assert diversity_group("2001:db8:1:2::1") == diversity_group("2001:db8:1:ffff::9")
    assert diversity_group("2001:db8:1:2::1") != diversity_group("2001:db8:2::1")
    assert diversity_group("::ffff:198.18.0.5") == diversity_group("198.18.0.77")
    assert diversity_group("127.0.0.1") == diversity_group("::1") == LOOPBACK_GROUP
    assert diversity_group("Node.Example.") == "name:node.example"


def test_a_sybil_host_with_many_ids_gets_one_share_of_an_object():
    honest = [Candidate(nid, f"198.18.{i}.10") for i, nid in enumerate(_ids(30, 1))]
    sybil = [Candidate(nid, "198.19.7.1") for nid in _ids(300, 2)]   # one host, 10x the ids
    for obj in range(200):
        chosen = choose(os.urandom(32), honest + sybil, 10)
        assert len(chosen) == 10
        assert sum(1 for nid in chosen if nid[0] == 2) <= 1


def test_one_subnet_counts_once_even_with_different_addresses():
    same_24 = [Candidate(nid, f"203.0.113.{i}") for i, nid in enumerate(_ids(20, 3))]
    others = [Candidate(nid, f"198.18.{i}.1") for i, nid in enumerate(_ids(3, 4))]
    chosen = choose(b"x" * 32, same_24 + others, 8)
    assert len(chosen) == 4   # three other subnets and one of the /24: fewer than asked
    assert Counter(nid[0] for nid in chosen) == {3: 1, 4: 3}


def test_on_loopback_the_diversity_rule_is_off():
    local = [Candidate(nid, "127.0.0.1") for nid in _ids(10, 5)]
    assert is_loopback_net(local)
    assert len(choose(b"y" * 32, local, 8)) == 8
    # forced on (the network lab's case): loopback is one host
    assert len(choose(b"y" * 32, local, 8, PlacementPolicy(diversity=True))) == 1
    mixed = local + [Candidate(_ids(1, 6)[0], "198.18.0.1")]
    assert not is_loopback_net(mixed)
    assert len(choose(b"y" * 32, mixed, 8)) == 2


def test_unvetted_nodes_get_at_most_about_five_percent_of_shares():
    vetted = [Candidate(nid, f"198.18.{i}.1") for i, nid in enumerate(_ids(100, 7))]
    new = [Candidate(nid, f"198.19.{i}.1", vetted=False) for i, nid in enumerate(_ids(100, 8))]
    placed = Counter()
    objects = 2000
    for obj in range(objects):
        for nid in choose(obj.to_bytes(8, "big") * 4, vetted + new, 8):
            placed[nid[0]] += 1
    share = placed[8] / sum(placed.values())
    assert 0.03 < share <= 0.065     # half the ids, ~5% of the shares
    per_object = max(Counter(nid[0] for nid in choose(bytes([o]) * 32, vetted + new, 8))[8]
                     for o in range(100))
    assert per_object <= 1


def test_with_too_few_vetted_groups_unvetted_nodes_fill_the_rest():
    vetted = [Candidate(nid, f"198.18.{i}.1") for i, nid in enumerate(_ids(3, 9))]
    new = [Candidate(nid, f"198.19.{i}.1", vetted=False) for i, nid in enumerate(_ids(10, 10))]
    chosen = choose(b"z" * 32, vetted + new, 8)
    assert len(chosen) == 8 and sum(1 for nid in chosen if nid[0] == 9) == 3


def test_unvetted_slots_are_a_fraction_of_objects():
    slots = sum(unvetted_slots(i.to_bytes(4, "big"), 8, 0.05) for i in range(10000))
    assert 3600 < slots < 4400      # 0.05 * 8 = 40% of objects get one unvetted share


def test_friends_only_places_on_certified_nodes_alone():
    nodes = [Candidate(nid, "127.0.0.1", certified=i % 2 == 0) for i, nid in enumerate(_ids(10, 11))]
    chosen = choose(b"f" * 32, nodes, 8, PlacementPolicy(friends_only=True))
    certified = {c.node_id for c in nodes if c.certified}
    assert set(chosen) == certified


def test_low_score_nodes_take_nothing_and_good_ones_win_more():
    good = [Candidate(nid, "127.0.0.1", score=1.0) for nid in _ids(10, 12)]
    middling = [Candidate(nid, "127.0.0.1", score=0.4) for nid in _ids(10, 13)]
    bad = [Candidate(nid, "127.0.0.1", score=0.1) for nid in _ids(10, 14)]
    wins = Counter()
    for obj in range(500):
        first = choose(obj.to_bytes(4, "big"), good + middling + bad, 3)
        assert not any(nid[0] == 14 for nid in first)
        wins[first[0][0]] += 1
    assert wins[12] > 1.8 * wins[13]


def test_placement_is_stable_per_object():
    nodes = [Candidate(nid, f"198.18.{i}.1") for i, nid in enumerate(_ids(40, 15))]
    assert choose(b"s" * 32, nodes, 8) == choose(b"s" * 32, list(reversed(nodes)), 8)


@pytest.mark.parametrize("k,n,fewest", [(4, 8, 2), (3, 5, 3), (2, 3, 3), (3, 4, 4)])
def test_most_per_host_keeps_at_most_n_minus_k_shares_per_host_from_the_fewest_hosts(k, n, fewest):
    """The bundle sender's rule: `fewest` hosts are the fewest on which n
    shares taking turns leave at most n - k on one (losing a host leaves k)."""
    assert most_per_host(n, fewest) <= n - k
    assert fewest == 1 or most_per_host(n, fewest - 1) > n - k


def test_many_ids_on_one_host_win_no_more_objects_than_one_id():
    honest = [Candidate(nid, f"198.18.{i}.10") for i, nid in enumerate(_ids(30, 16))]
    sybil = [Candidate(nid, "198.19.7.1") for nid in _ids(300, 17)]
    wins = Counter()
    objects = 600
    for obj in range(objects):
        for nid in choose(obj.to_bytes(4, "big") * 8, honest + sybil, 10):
            wins["sybil" if nid[0] == 17 else nid] += 1
    honest_mean = sum(v for k, v in wins.items() if k != "sybil") / 30
    assert wins["sybil"] < 1.5 * honest_mean     # one host, one ticket (~10/31 of objects)
