"""The lab's punch report from STATS rows (flud/netlab/punchcheck.py): pure."""
from flud.netlab import punchcheck


def _node(name, kind, node_id):
    return {"name": name, "kind": kind, "node_id": node_id}


def _stats(peers):
    return {"punch": {"peers": {p: {"outcome": o, "role": r} for p, (o, r) in peers.items()}}}


NODES = [_node("h000", "public", "aa"), _node("n00", "cone", "c0"), _node("n01", "cone", "c1"),
         _node("n02", "symmetric", "s2")]


def test_a_pair_is_punched_if_either_side_says_so_and_settled_by_the_initiator():
    rows = [
        (NODES[0], {}),
        (NODES[1], _stats({"c1": ("punched", "initiator"),
                           "s2": ("3 attempts failed: 198.18.202.1:7400: timed out", "initiator")})),
        (NODES[2], _stats({"c0": ("punched", "responder"),
                           "s2": ("attempt 2 failed: timed out", "responder")})),
        (NODES[3], None),                   # no answer from it: what the others say counts
    ]
    outcomes = punchcheck.pair_outcomes(rows)
    assert outcomes == {("n00", "n01"): "punched",
                        ("n00", "n02"): "3 attempts failed: 198.18.202.1:7400: timed out",
                        ("n01", "n02"): None}      # only the responder spoke: not settled
    assert not punchcheck.settled(outcomes)


def test_the_report_counts_direct_pairs_in_all_and_where_one_side_is_cone_like():
    outcomes = {("n00", "n01"): "punched", ("n00", "n02"): "3 attempts failed: x: timed out",
                ("n01", "n02"): "both NATs change ports (symmetric): no outside port can be "
                                "predicted"}
    figures = punchcheck.figures(NODES, outcomes)
    assert figures["NATed pairs punched (direct TCP through both NATs)"] == \
        "1 of 3 (cone-cone 1/1, cone-symmetric 0/2)"
    assert figures["NATed pairs still relayed"].startswith("2 of 3: 3 attempts failed")
    # 6 pairs: 3 with the public node, the punched one; 2 relayed
    assert figures["node pairs connected directly or punched"] == "4 of 6 (66.7 %)"
    assert figures["  where at least one side is cone-like"] == "4 of 6 (66.7 %)"
    only_symmetric = [_node("n00", "symmetric", "a"), _node("n01", "symmetric", "b")]
    assert punchcheck.figures(only_symmetric, {("n00", "n01"): "x"})[
        "  where at least one side is cone-like"] == "none"
