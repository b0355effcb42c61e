"""Placement that a single host or operator cannot capture (pure).

Candidates in, ranked and filtered destinations out. The rules, in order:

1. Friends only (a home's setting): only nodes certified by the user's key.
2. Reputation: a node whose score (reputation.py, kept by this client from
   what it saw itself) is below `min_score` takes no new share; the others
   are ranked by score-weighted rendezvous hashing, so a good node wins more
   objects than a middling one, and the order is still stable per object
   (a node joining or leaving moves only what it wins or held).
3. Diversity: at most one share of an object per *diversity group*: the
   /24 of an IPv4 address, the /48 of an IPv6 one, so nodes sharing a host
   (one address) or a hosting operator's subnet count once, and the groups,
   not the ids, are what the rendezvous draw ranks (group_rank): a host
   with a hundred ids wins as many objects as a host with one. A node is
   identified by the address this client reaches it at, never by a host
   id the node states about itself: a Sybil would simply state a new one.
4. Vetting: a node this client has not yet vetted (reputation.vetted: N
   verifies passed over D days) may take at most one share of an object, and
   only for a deterministic fraction of objects, so unvetted nodes get at most
   VETTING_SHARE of all shares. While too few vetted groups exist to fill an
   object (a new home, a new grid), unvetted ones fill the rest: otherwise a
   fresh client could store nothing. Diversity still binds them.

On a loopback testnet (every candidate's address is loopback) the network is
one host by construction and rule 3 is off (rules 1, 2, 4 stay). A home on a
real network where some nodes are loopback counts those as one group.
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Iterable, Optional

import blake3

# Unvetted nodes take at most this share of the shares placed (Storj's 5%).
VETTING_SHARE = 0.05
# A node whose reputation falls below this takes no new share, and
# `flud check --repair` moves its shares to others (reputation.py).
MIN_SCORE = 0.3
LOOPBACK_GROUP = "loopback"
IPV4_PREFIX = 24
IPV6_PREFIX = 48


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node as placement sees it: its id, the host this client reaches it
    at (an IP address or a name), and what this client knows of it."""
    node_id: bytes
    host: str
    score: float = 1.0       # reputation in [0, 1]; 1 for a node never seen
    vetted: bool = True
    certified: bool = False  # by the user's key (friends' grid)


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    friends_only: bool = False
    min_score: float = MIN_SCORE
    vetting_share: float = VETTING_SHARE
    # None: decided from the candidates (off when all are loopback)
    diversity: Optional[bool] = None


def diversity_group(host: str) -> str:
    """The group a host counts in: an IPv4 /24, an IPv6 /48 (an IPv4-mapped
    IPv6 address as its IPv4), loopback as one group, a name as itself."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "name:" + host.lower().rstrip(".")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address.is_loopback:
        return LOOPBACK_GROUP
    prefix = IPV4_PREFIX if address.version == 4 else IPV6_PREFIX
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


def is_loopback_net(candidates: Iterable[Candidate]) -> bool:
    """Every candidate on loopback: a testnet on one machine."""
    hosts = [c.host for c in candidates]
    return bool(hosts) and all(diversity_group(h) == LOOPBACK_GROUP for h in hosts)


def diversity_on(candidates, policy: PlacementPolicy) -> bool:
    if policy.diversity is not None:
        return policy.diversity
    return not is_loopback_net(candidates)


def weighted_rank(object_id: bytes, candidates) -> list:
    """Candidates by score-weighted rendezvous hash, best first: each
    (object, node) pair draws u in (0, 1) from BLAKE3, and the key
    -score / ln(u) makes a node's chance to rank first proportional to its
    score. With equal scores the order is plain rendezvous order."""
    def key(c):
        digest = blake3.blake3(object_id + c.node_id).digest()
        u = (int.from_bytes(digest[:8], "big") + 1) / (2 ** 64 + 2)
        return (-max(c.score, 1e-9) / math.log(u), digest)
    return sorted(candidates, key=key, reverse=True)


def unvetted_slots(object_id: bytes, count: int, share: float) -> int:
    """How many of an object's `count` places unvetted nodes may take: one,
    for a fraction share * count of objects (chosen by the object's hash),
    else none; so unvetted nodes hold about `share` of all shares."""
    if count <= 0 or share <= 0:
        return 0
    fraction = min(1.0, share * count)
    draw = int.from_bytes(blake3.blake3(b"vetting" + object_id).digest()[:8], "big") / 2 ** 64
    return 1 if draw < fraction else 0


def group_rank(object_id: bytes, candidates) -> list:
    """One candidate per diversity group, the groups in score-weighted
    rendezvous order of (object, group): a host or subnet is one ticket in
    the draw however many ids it runs, so fake ids buy no extra objects.
    Each group is represented by its best node for this object (a vetted
    one where it has one), weighted by its best score."""
    members = {}
    for c in candidates:
        members.setdefault(diversity_group(c.host), []).append(c)
    picks = []
    for group, nodes in members.items():
        vetted = [c for c in nodes if c.vetted] or nodes
        best = weighted_rank(object_id, vetted)[0]
        picks.append((Candidate(group.encode(), best.host, max(c.score for c in vetted)), best))
    order = weighted_rank(object_id, [ticket for ticket, _ in picks])
    chosen = {ticket.node_id: best for ticket, best in picks}
    return [chosen[ticket.node_id] for ticket in order]


def choose(object_id: bytes, candidates, count: int,
           policy: PlacementPolicy = PlacementPolicy()) -> list:
    """Up to `count` node ids for an object's shares, best first (fewer when
    the rules leave fewer: the caller decides whether that is enough)."""
    candidates = list(candidates)
    diverse = diversity_on(candidates, policy)
    pool = [c for c in candidates
            if (c.certified or not policy.friends_only) and c.score >= policy.min_score]
    ranked = group_rank(object_id, pool) if diverse else weighted_rank(object_id, pool)
    chosen = []
    allowed = unvetted_slots(object_id, count, policy.vetting_share)
    for c in ranked:
        if len(chosen) == count:
            break
        if c.vetted:
            chosen.append(c)
        elif allowed:
            chosen.append(c)
            allowed -= 1
    # Too few vetted groups: unvetted nodes fill the rest (a new home or grid).
    for c in ranked:
        if len(chosen) == count:
            break
        if not c.vetted and c not in chosen:
            chosen.append(c)
    # Keep the ranked order among what was chosen.
    order = {c.node_id: i for i, c in enumerate(ranked)}
    return [c.node_id for c in sorted(chosen, key=lambda c: order[c.node_id])]


def most_per_host(n: int, hosts: int) -> int:
    """Shares per host when n shares take turns over `hosts` hosts."""
    return -(-n // hosts) if hosts else n
