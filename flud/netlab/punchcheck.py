"""How the lab's NATed node pairs connect: punched (a direct TCP connection
through both NATs) or relayed, and why (docs/network-lab.md, "Hole
punching"). Pure: reads the nodes' STATS (`punch`), as Lab.stats() returns
them.

Each node's STATS lists, per peer it punched with, the outcome: "punched",
or why not. A pair is punched if either side says so; it is settled when
one side says so or the side that started the punch gave up (a responder's
"attempt N failed" may still be followed by another attempt).
"""
from itertools import combinations

CONE_LIKE = ("public", "cone", "double")
# Nodes behind NAT dial each other through their relays when this is set
# (flud/node/puncher.py, RelayedPeerDialer): the lab sets it for its nodes.
DIAL_RELAYED_ENV = "FLUD_DIAL_RELAYED_PEERS"


def pair_outcomes(rows) -> dict:
    """{(name, name): "punched" | reason | None (not settled)} for every
    pair of NATed nodes, from [(node, STATS or None)]."""
    natted = [(n, s) for n, s in rows if n["kind"] != "public"]
    by_id = {n["node_id"]: n["name"] for n, _ in natted}
    said = {}      # (from name, about name) -> (outcome, role)
    for node, stats in natted:
        for peer_hex, entry in (((stats or {}).get("punch") or {}).get("peers") or {}).items():
            if peer_hex in by_id:
                said[(node["name"], by_id[peer_hex])] = (entry["outcome"], entry["role"])
    outcomes = {}
    for (a, _), (b, _) in combinations(natted, 2):
        views = [said.get((a["name"], b["name"])), said.get((b["name"], a["name"]))]
        views = [v for v in views if v is not None]
        if any(outcome == "punched" for outcome, _ in views):
            outcomes[(a["name"], b["name"])] = "punched"
            continue
        final = [outcome for outcome, role in views if role == "initiator"]
        outcomes[(a["name"], b["name"])] = final[0] if final else None
    return outcomes


def settled(outcomes) -> bool:
    return all(v is not None for v in outcomes.values())


def figures(nodes, outcomes) -> dict:
    """The report's lines: NATed pairs punched, those relayed and why, and
    the share of all pairs connected directly or punched (in all, and where
    at least one side is cone-like: public, cone or double NAT)."""
    kinds = {n["name"]: n["kind"] for n in nodes}
    pairs = list(combinations([n["name"] for n in nodes], 2))
    punched = {p for p, v in outcomes.items() if v == "punched"}
    relayed = {p: v for p, v in outcomes.items() if v != "punched"}

    def direct(pair):
        return pair in punched or "public" in (kinds[pair[0]], kinds[pair[1]])

    cone_like = [p for p in pairs if kinds[p[0]] in CONE_LIKE or kinds[p[1]] in CONE_LIKE]
    by_kinds = {}
    for (a, b), value in outcomes.items():
        label = "-".join(sorted((kinds[a], kinds[b])))
        done, total = by_kinds.get(label, (0, 0))
        by_kinds[label] = (done + (value == "punched"), total + 1)
    reasons = sorted({_short(v) for v in relayed.values()})
    return {
        "NATed pairs punched (direct TCP through both NATs)":
            f"{len(punched)} of {len(outcomes)} ("
            + ", ".join(f"{k} {d}/{t}" for k, (d, t) in sorted(by_kinds.items())) + ")",
        "NATed pairs still relayed":
            f"{len(relayed)} of {len(outcomes)}" + (f": {'; '.join(reasons)}" if reasons else ""),
        "node pairs connected directly or punched":
            _share(sum(map(direct, pairs)), len(pairs)),
        "  where at least one side is cone-like":
            _share(sum(map(direct, cone_like)), len(cone_like)),
    }


def _share(count, total) -> str:
    return f"{count} of {total} ({100 * count / total:.1f} %)" if total else "none"


def _short(reason) -> str:
    if reason is None:
        return "not settled in time"
    if "symmetric" in reason:
        return reason
    if "attempts failed" in reason:
        return reason.split(":", 1)[0] + " (no SYN got through)"
    return reason[:120]
