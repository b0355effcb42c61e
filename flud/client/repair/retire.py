"""Moving data off nodes this home no longer trusts (pure).

A node whose reputation fell below the threshold (flud/trust/reputation.py),
or that lost its certificate in a home that keeps to friends, keeps its
shares until `flud check --repair` re-creates them elsewhere; the old
copies are then surplus, and prune deletes them. A share on such a node is
counted as one to re-create, as long as k other confirmed shares remain to
re-create it from (the node's own copy is never a source: it is what is
not trusted). The node takes no new share: it leaves the candidates.
"""


def retiring(trust, objects, healths, candidates: list) -> list:
    """healths with the shares on distrusted nodes added to what a repair
    re-creates; `candidates` (node hex, changed in place) loses those nodes."""
    holders = {share.node for obj in objects for share in obj.shares}
    bad = {node.hex() for node in trust.below_threshold(bytes.fromhex(n) for n in holders)}
    bad |= {node.hex() for node in trust.below_threshold(bytes.fromhex(n) for n in candidates)}
    candidates[:] = [node for node in candidates if node not in bad]
    if not bad:
        return healths
    out = []
    for obj, health in zip(objects, healths):
        leaving = sorted(s.index for s in obj.shares
                         if s.node in bad and s.index not in health.lost
                         and s.index not in health.at_risk)
        # keep k confirmed shares that are not leaving to re-create from
        room = health.healthy - len(leaving) - obj.k
        if room < 0:
            leaving = leaving[:max(0, len(leaving) + room)]
        if not leaving:
            out.append(health)
            continue
        out.append(health._replace(lost=tuple(sorted(set(health.lost) | set(leaving))),
                                   needs_repair=True))
    return out

