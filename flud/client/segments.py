"""One segment's way to the nodes and back.

prepare (CPU, in the pool): digest -> convergent key -> AES-CTR -> zfec into
n+extra shares -> BLAKE3 share keys -> VERIFY challenges.
store: n+extra STOREs to distinct nodes by rendezvous rank; a failed STORE
moves to the next candidate; once n have landed the rest are cancelled
(the long-tail cut).
fetch: ask the k cheapest holders (primaries first: no decode), add holders
as shares fail their hash check or their node fails; decode; decrypt; check
the plaintext against the convergent key.
"""
import hashlib
import hmac
import logging
from dataclasses import dataclass

import blake3
from twisted.internet import defer

from flud.crypto import content_digest, convergent_key, decrypt_ctr, encrypt_ctr
from flud.protocol.errors import RemoteError

log = logging.getLogger("flud.client")

CHALLENGES_PER_SHARE = 2
CHALLENGE_SPAN = 64 * 1024
MAX_ATTEMPTS_PER_SHARE = 4


class StoreFailed(Exception):
    pass


class FetchFailed(Exception):
    pass


def challenges_for(secret: bytes, key: bytes, share) -> list:
    """[(offset, length, expected digest hex)] a verifier can ask later.

    Nonces are derived from the user's secret, so nothing but the expected
    answers needs storing, and no node can precompute them."""
    out = []
    size = len(share)
    for i in range(CHALLENGES_PER_SHARE):
        nonce = challenge_nonce(secret, key, i)
        # The first challenge covers the whole share (catches any corruption);
        # later ones a random span (cheap spot checks).
        span = size if i == 0 else min(size, CHALLENGE_SPAN)
        offset = int.from_bytes(nonce[:8], "big") % (size - span + 1) if size else 0
        expected = blake3.blake3(nonce + bytes(share[offset:offset + span])).digest()
        out.append([offset, span, expected[:16].hex()])
    return out


def challenge_nonce(secret: bytes, key: bytes, index: int) -> bytes:
    return hmac.new(secret, b"flud-verify-v1" + key + bytes([index]), hashlib.sha256).digest()[:16]


@dataclass
class PreparedSegment:
    key: bytes            # convergent AES key
    length: int           # plaintext bytes
    block_length: int
    shares: list          # n+extra share bytes
    share_keys: list
    challenges: dict      # share key hex -> challenges

    @property
    def buffered(self) -> int:
        return sum(len(s) for s in self.shares)


def prepare_segment(secret: bytes, coder, data) -> PreparedSegment:
    key = convergent_key(secret, content_digest(data))
    block_length, shares = coder.encode(encrypt_ctr(key, data))
    keys = [blake3.blake3(s).digest() for s in shares]
    challenges = {k.hex(): challenges_for(secret, k, s) for k, s in zip(keys, shares)}
    return PreparedSegment(key, len(data), block_length, shares, keys, challenges)


@defer.inlineCallbacks
def store_segment(network, prep: PreparedSegment, keep: int, counters=None):
    """Store the shares on distinct nodes; fires with [[index, key hex, node hex]]."""
    total = len(prep.shares)
    ranked = network.place(prep.share_keys[0], total + total)
    if len(ranked) < keep:
        raise StoreFailed(f"only {len(ranked)} nodes are reachable; {keep} are needed "
                          f"for one segment. Start more nodes or lower n.")
    spare = iter(ranked[total:])
    landed = []
    attempts = {}
    in_flight = {}
    done = defer.Deferred()

    def launch(index, node_id):
        attempts[index] = attempts.get(index, 0) + 1
        d = network.call(node_id, "store", prep.share_keys[index], prep.shares[index])
        in_flight[index] = (node_id, d)
        d.addCallbacks(succeeded, failed, callbackArgs=(index, node_id), errbackArgs=(index, node_id))

    def succeeded(_, index, node_id):
        in_flight.pop(index, None)
        landed.append([index, prep.share_keys[index].hex(), node_id.hex()])
        if counters is not None:
            counters["bytes_sent"] += len(prep.shares[index])
            counters["stores"] += 1
        if len(landed) == keep and not done.called:
            for other, (other_node, other_d) in list(in_flight.items()):
                cancel_store(network, other_node, other_d)
            done.callback(None)
        check_end()

    def failed(failure, index, node_id):
        in_flight.pop(index, None)
        if failure.check(RemoteError) and getattr(failure.value, "code", None) == 11:
            return check_end()  # cancelled by us
        if not done.called:
            log.warning("share %d of a segment failed on %s: %s", index,
                        node_id.hex()[:12], failure.getErrorMessage())
            network.mark_failed(node_id)
            replacement = next(spare, None)
            if replacement is not None and attempts[index] < MAX_ATTEMPTS_PER_SHARE:
                return launch(index, replacement)
        check_end()

    def check_end():
        if not in_flight and not done.called:
            done.errback(StoreFailed(f"only {len(landed)} of {keep} shares of a segment "
                                     f"could be stored; too few nodes are answering"))

    for index in range(total):
        launch(index, ranked[index])
    yield done
    return sorted(landed)


def cancel_store(network, node_id, d) -> None:
    node = network.net.pool._by_peer.get(node_id)
    if node is not None:
        node.cancel(d)


def _fits(share: bytes, key_hex: str) -> bool:
    return blake3.blake3(share).hexdigest() == key_hex


@defer.inlineCallbacks
def fetch_segment(network, pool, coder, secret, record, report=None):
    """record: {"key", "len", "bl", "shares": [[i, key hex, node hex]]} -> plaintext."""
    k = coder.k
    holders = sorted(record["shares"], key=lambda s: s[0])  # primaries first: no decode
    waiting = iter(holders)
    got = {}
    failures = []

    def ask(holder):
        index, key_hex, node_hex = holder
        d = network.call(bytes.fromhex(node_hex), "retrieve", bytes.fromhex(key_hex))
        d.addCallbacks(lambda data: ("ok", holder, data), lambda f: ("err", holder, f))
        return d

    active = [ask(h) for h in (next(waiting, None) for _ in range(k)) if h is not None]
    while len(got) < k and active:
        results = yield defer.DeferredList(active)
        active = []
        for _, (status, holder, value) in results:
            index, key_hex, node_hex = holder
            if status == "ok" and _fits(value, key_hex):
                got[index] = value
                continue
            why = "corrupt (hash mismatch)" if status == "ok" else value.getErrorMessage()
            failures.append((node_hex, key_hex, why))
            if report is not None:
                report(node_hex, key_hex, why)
            nxt = next(waiting, None)
            if nxt is not None:
                active.append(ask(nxt))
    if len(got) < k:
        raise FetchFailed(f"only {len(got)} of the {k} shares needed for a segment could "
                          f"be fetched: " + "; ".join(f"{n[:12]}: {w}" for n, _, w in failures))
    key = bytes.fromhex(record["key"])
    plaintext = yield pool.run(_decode_and_decrypt, coder, got, record, key)
    if convergent_key(secret, content_digest(plaintext)) != key:
        raise FetchFailed("a segment decoded to the wrong bytes; its shares are inconsistent")
    return plaintext


def _decode_and_decrypt(coder, got, record, key):
    cipher = coder.decode(got, record["len"])
    return decrypt_ctr(key, cipher)
