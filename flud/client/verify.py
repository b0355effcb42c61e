"""`flud verify`: challenge the holders of this user's shares.

Each share has precomputed challenges (nonce from the user secret, a range,
the expected digest) recorded in the manifest, so verifying needs neither the
files nor a download, and works after a total-loss restore.

A share has two: the whole share, and a spot check of one CHALLENGE_SPAN
span. Runs take them in turn (the spot check is cheap for the nodes), so a
spot round can miss a corruption outside its span while every share looks
well: the output says which round it ran, and `--full` asks for the whole
share every time.
"""
import random

from twisted.internet import defer

from flud.client.records import LARGE, Bundle, Challenge, content_from_wire
from flud.client.segments import CHALLENGE_SPAN, challenge_nonce
from flud.protocol.errors import ErrorCode, RemoteError

IN_FLIGHT = 128
# A share's challenges, in the order they are recorded
# (segments.challenges_for, extents.StreamHashes.challenges).
WHOLE, SPOT = 0, 1


def challenge_index(round_number: int, count: int, full: bool = False) -> int:
    """Which of a share's `count` challenges a round asks."""
    if full or count < 2:
        return WHOLE
    return round_number % count


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


class IndexChallenges:
    """The VERIFY challenges of a version-2 snapshot: the local index's, or
    the holder map's (a total-loss home has none of its own); a version-1
    manifest carried its own. sources: objects with challenges(share key)."""

    def __init__(self, *sources):
        self._sources = sources

    def get(self, share_key, default=None):
        for source in self._sources:
            found = source.challenges(share_key)
            if found is not None:
                return found
        return default


def share_locations(manifest) -> list:
    """[(share key hex, node hex)] for every share the snapshot uses."""
    out = {}
    for record in manifest["contents"].values():
        content = content_from_wire(record)
        if content.kind == LARGE:
            for holder in content.holders():
                out[holder.key] = holder.node
    for bundle in manifest["bundles"].values():
        for holder in Bundle.holders_from_wire(bundle):
            out[holder.key] = holder.node
    return sorted(out.items())


@defer.inlineCallbacks
def verify(network, secret, manifest, round_number, sample=1.0, rng=None, full=False):
    """Challenge each share's holder: ({node hex: counts}, [(node hex, share
    key hex, what)]). full: the whole-share challenge, whatever the round."""
    rng = rng or random.Random()
    shares = share_locations(manifest)
    if sample < 1.0:
        shares = rng.sample(shares, max(1, int(len(shares) * sample))) if shares else []
    per_node = {}
    slots = defer.DeferredSemaphore(IN_FLIGHT)
    bad = []

    def tally(node_hex, what):
        per_node.setdefault(node_hex, {"confirmed": 0, "missing": 0, "corrupt": 0,
                                       "unreachable": 0})[what] += 1

    @defer.inlineCallbacks
    def check(key_hex, node_hex):
        challenges = manifest["challenges"].get(key_hex)
        if not challenges:
            return
        index = challenge_index(round_number, len(challenges), full)
        challenge = Challenge.from_wire(challenges[index])
        offset, length, expected = challenge.offset, challenge.span, challenge.digest
        key = bytes.fromhex(key_hex)
        # An extent's stream records its nonces (they come from what was
        # known before its key); a share's derive from its key.
        nonce = (bytes.fromhex(challenge.nonce) if challenge.nonce is not None
                 else challenge_nonce(secret, key, index))
        try:
            digest = yield network.call(bytes.fromhex(node_hex), "verify", key, nonce,
                                        offset, length)
        except RemoteError as err:
            what = "missing" if err.code == ErrorCode.NOT_FOUND else "corrupt"
            tally(node_hex, what)
            bad.append((node_hex, key_hex, what))
            return
        except Exception:
            tally(node_hex, "unreachable")
            bad.append((node_hex, key_hex, "unreachable"))
            return
        if digest[:16].hex() == expected:
            tally(node_hex, "confirmed")
        else:
            tally(node_hex, "corrupt")
            bad.append((node_hex, key_hex, "corrupt"))

    yield defer.gatherResults([slots.run(check, k, n) for k, n in shares], consumeErrors=True)
    return per_node, bad
