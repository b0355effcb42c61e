"""`flud verify`: challenge the holders of this user's shares.

Each share has precomputed challenges (nonce from the user secret, a range,
the expected digest) recorded in the manifest, so verifying needs neither the
files nor a download, and works after a total-loss restore.

A share has two: the whole share, and a spot check of one CHALLENGE_SPAN
span. Runs take them in turn (the spot check is cheap for the nodes), so a
spot round can miss a corruption outside its span while every share looks
well: the output says which round it ran, and `--full` asks for the whole
share every time.

What a restore of a version-2 snapshot reads is challenged too, not only
its files: the bundles holding its directory records, its large files'
content records, the map pages and the head (the snapshot record and the
map index): tree_shares.py walks the tree for them. A share whose challenges were never recorded
where this home can read them (a home made from the key alone has no
challenges for the map's own bundles) is fetched whole and checked against
its address instead (the share key is the hash of its bytes), so no share
a restore needs goes unchecked. A record that could not be read (its path
is in the share set's `damaged`) is counted by the caller: a verify is never
healthier than a restore.
"""
import random

import blake3
from twisted.internet import defer

from flud.client.records import Challenge
from flud.client.repository.segments import CHALLENGE_SPAN, challenge_nonce
from flud.client.repository.share_challenges import (  # noqa: F401 (SPOT: its callers')
    SPOT, WHOLE, challenge_index)
from flud.protocol.errors import ErrorCode, RemoteError

IN_FLIGHT = 128
# Shares without recorded challenges, fetched whole at once (the record
# bundles they belong to are small, but an extent's share is a block).
DOWNLOADS_IN_FLIGHT = 4
# What a share's check found: "unchallenged" when no challenge was recorded
# for it and it is too large to fetch whole (an extent's stream).
OUTCOMES = ("confirmed", "missing", "corrupt", "unreachable", "unchallenged")


def _span() -> str:
    return f"{CHALLENGE_SPAN // 1024} KiB"


def describe_round(index: int) -> str:
    if index == WHOLE:
        return "whole-share challenge: every byte of every share read and hashed by its node"
    return (f"spot check of a {_span()} span of each share (a corruption outside it goes "
            f"unseen; `flud verify --full` reads every byte)")


def summary_line(index: int, confirmed: int, checked: int) -> str:
    if index == WHOLE:
        return f"{confirmed} of {checked} shares confirmed whole (every byte)"
    return (f"{confirmed} of {checked} shares confirmed by a spot check only ({_span()} of "
            f"each); run `flud verify --full` to read every byte")


def short_of_k(shares, bad) -> list:
    """The objects a restore could not rebuild from the shares this verify
    confirmed: [what] of each bundle, extent or segment with fewer than k
    distinct shares confirmed. shares: the ShareSet verified; bad: verify's
    [(node, share key, outcome)] of every share not confirmed (over every
    share: not for a sample)."""
    unconfirmed = {key for _, key, _ in bad}
    short = []
    for what, k, holders in shares.objects():
        confirmed = {h.index for h in holders if h.key not in unconfirmed}
        if holders and len(confirmed) < k:
            short.append(f"{what}: {len(confirmed)} of the {k} shares needed confirmed")
    return short


@defer.inlineCallbacks
def verify(network, secret, share_set, round_number, sample=1.0, rng=None, full=False):
    """Challenge the holder of each share of share_set (a ShareSet):
    ({node hex: {outcome: count}}, [(node hex, share key hex, outcome)] of
    every share not confirmed). full: the whole-share challenge, whatever
    the round."""
    rng = rng or random.Random()
    shares = share_set.locations()
    if sample < 1.0:
        shares = rng.sample(shares, max(1, int(len(shares) * sample))) if shares else []
    round_ = _Round(network, secret, share_set, round_number, full)
    slots = defer.DeferredSemaphore(IN_FLIGHT)
    yield defer.gatherResults([slots.run(round_.check, k, n) for k, n in shares],
                              consumeErrors=True)
    return round_.per_node, round_.bad


class _Round:
    """One verify round's challenges and what they found: per_node {node
    hex: {outcome: count}}, bad [(node hex, share key hex, outcome)]."""

    def __init__(self, network, secret, share_set, round_number, full):
        self.network = network
        self.secret = secret
        self.share_set = share_set
        self.round_number = round_number
        self.full = full
        self.downloads = defer.DeferredSemaphore(DOWNLOADS_IN_FLIGHT)
        self.per_node = {}
        self.bad = []

    def tally(self, node_hex, what):
        self.per_node.setdefault(node_hex, dict.fromkeys(OUTCOMES, 0))[what] += 1

    @defer.inlineCallbacks
    def check(self, key_hex, node_hex):
        challenges = self.share_set.challenges.get(key_hex)
        if not challenges and self.share_set.fetchable(key_hex):
            yield self.downloads.run(self.fetch_whole, key_hex, node_hex)
            return
        if not challenges:   # nothing says what it should hold: unchecked, and said so
            self.tally(node_hex, "unchallenged")
            self.bad.append((node_hex, key_hex, "unchallenged"))
            return
        index = challenge_index(self.round_number, len(challenges), self.full)
        challenge = Challenge.from_wire(challenges[index])
        offset, length, expected = challenge.offset, challenge.span, challenge.digest
        key = bytes.fromhex(key_hex)
        # An extent's stream records its nonces (they come from what was
        # known before its key); a share's derive from its key.
        nonce = (bytes.fromhex(challenge.nonce) if challenge.nonce is not None
                 else challenge_nonce(self.secret, key, index))
        try:
            digest = yield self.network.verify(bytes.fromhex(node_hex), key, nonce,
                                               offset, length)
        except Exception as err:
            return self.failed(node_hex, key_hex, err)
        self.judge(node_hex, key_hex, digest[:16].hex() == expected)

    def failed(self, node_hex, key_hex, err):
        if isinstance(err, RemoteError):
            what = "missing" if err.code == ErrorCode.NOT_FOUND else "corrupt"
        else:
            what = "unreachable"
        self.tally(node_hex, what)
        self.bad.append((node_hex, key_hex, what))

    def judge(self, node_hex, key_hex, sound):
        if sound:
            self.tally(node_hex, "confirmed")
        else:
            self.tally(node_hex, "corrupt")
            self.bad.append((node_hex, key_hex, "corrupt"))

    @defer.inlineCallbacks
    def fetch_whole(self, key_hex, node_hex):
        """No challenge recorded for this share: its bytes, checked against
        its address (the hash of what it holds)."""
        try:
            data = yield self.network.retrieve(bytes.fromhex(node_hex), bytes.fromhex(key_hex))
        except Exception as err:
            return self.failed(node_hex, key_hex, err)
        self.judge(node_hex, key_hex, blake3.blake3(data).digest().hex() == key_hex)
