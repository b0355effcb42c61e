"""The client's trust glue (client/trust_view.py): candidates from the
network's addresses, friends only, and the bundle sender's host bound."""
from types import SimpleNamespace

from flud.client.friends_store import FriendsStore
from flud.client.repository.bundle_sender import _hosts_too_few
from flud.client.reputation_store import ReputationStore
from flud.client.trust_view import TrustView
from flud.keys import Identity
from flud.protocol.client import NodeAddress
from flud.trust.reputation import VERIFY_FAILED

NOW = 1_800_000_000.0


def _nodes(hosts):
    nodes = {}
    for i, host in enumerate(hosts):
        node_id = bytes([i + 1]) * 32
        nodes[node_id] = NodeAddress(node_id, host, 4000 + i)
    return nodes


def _view(tmp_path, friends=None):
    return TrustView(ReputationStore(str(tmp_path)), friends, clock=lambda: NOW)


def test_nodes_on_one_host_take_one_share_of_an_object(tmp_path):
    nodes = _nodes(["198.18.0.1"] * 6 + ["198.18.1.1", "198.18.2.1"])
    view = _view(tmp_path)
    assert len(view.choose(b"o" * 32, nodes, list(nodes), 8)) == 3
    assert view.diverse(nodes)
    groups = view.groups(nodes)
    assert len(set(groups.values())) == 3


def test_on_loopback_every_node_may_take_a_share(tmp_path):
    nodes = _nodes(["127.0.0.1"] * 8)
    view = _view(tmp_path)
    assert len(view.choose(b"o" * 32, nodes, list(nodes), 8)) == 8
    assert not view.diverse(nodes)
    assert len(set(view.groups(nodes).values())) == 8


def test_a_bundle_never_piles_more_than_n_minus_k_shares_on_a_host(tmp_path):
    view = _view(tmp_path)
    spread = SimpleNamespace(trust=view, nodes=_nodes(["198.18.0.1", "198.18.1.1"]))
    assert not _hosts_too_few(spread, 2, 4, 8)    # 4 + 4: losing a host leaves k
    assert _hosts_too_few(spread, 2, 3, 4)        # 2 + 2 of 3-of-4: one host holds 2 > 1
    assert _hosts_too_few(spread, 1, 4, 8)
    local = SimpleNamespace(trust=view, nodes=_nodes(["127.0.0.1"] * 2))
    assert not _hosts_too_few(local, 1, 4, 8)     # a testnet: one host by construction
    assert not _hosts_too_few(SimpleNamespace(nodes={}), 1, 4, 8)   # no trust rules


def test_friends_only_and_a_node_that_lost_a_share(tmp_path):
    user = Identity.generate()
    nodes = _nodes(["127.0.0.1"] * 6)
    ids = list(nodes)
    friends = FriendsStore(str(tmp_path), user)
    for node_id in ids[:4]:
        friends.add(node_id, NOW - 10, 86400)
    friends.set_friends_only(True)
    view = _view(tmp_path, FriendsStore(str(tmp_path), user))
    assert set(view.choose(b"x" * 32, nodes, ids, 6)) == set(ids[:4])
    view.observed(ids[0], "corrupt")
    assert set(view.choose(b"x" * 32, nodes, ids, 6)) == set(ids[1:4])
    assert view.below_threshold(ids) == {ids[0], ids[4], ids[5]}
    assert view.reputation.standing(ids[0], NOW).counts[VERIFY_FAILED] == 1


def test_end_of_run_records_up_down_and_failed_requests(tmp_path):
    view = _view(tmp_path)
    a, b, c = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32
    view.end_run({a: [5, 0], b: [0, 2], c: [3, 1]}, failed={c})
    counts = {n: view.reputation.standing(n, NOW).counts for n in (a, b, c)}
    assert counts[a]["up"] == 1 and counts[a]["request_ok"] == 1
    assert counts[b]["down"] == 1 and counts[b]["up"] == 0
    assert counts[c]["up"] == 1 and counts[c]["request_failed"] == 1


def test_a_run_where_no_node_answered_says_nothing_of_them(tmp_path):
    view = _view(tmp_path)
    a, b = bytes([1]) * 32, bytes([2]) * 32
    view.end_run({a: [0, 3], b: [0, 1]}, failed={a, b})   # the client was offline
    assert view.reputation.known() == []


def test_verify_counts_feed_reputation(tmp_path):
    view = _view(tmp_path)
    a, b = bytes([1]) * 32, bytes([2]) * 32
    view.verified({a.hex(): {"confirmed": 12, "missing": 0, "corrupt": 0},
                   b.hex(): {"confirmed": 2, "missing": 1, "corrupt": 1}})
    assert view.may_hold(a) and not view.may_hold(b)
    assert view.reputation.standing(a, NOW).verifies_passed == 12
