"""One segment's way to the nodes and back.

prepare (CPU, in the pool): digest -> convergent key -> (a large file's
segment: compressed in place, if its plan says so) -> AES-CTR -> zfec into
n shares -> BLAKE3 share keys -> VERIFY challenges.
store: the extent uploads and the bundle sender (extents.py, bundle_sender.py).
fetch: ask the k cheapest holders (primaries first: no decode), add holders
as shares fail their hash check or their node fails; decode; decrypt; check
the plaintext against the convergent key.
"""
import hashlib
import hmac
from dataclasses import dataclass
from typing import Optional

import blake3
from twisted.internet import defer

from flud.client.gather import gather
from flud.client.records import Challenge, SegmentFetch
from flud.crypto import crypt_ctr_in_place, decrypt_ctr, encrypt_ctr, file_convergence
from flud.errors import FetchFailed, FludError, StoreFailed  # noqa: F401 (re-exported)

CHALLENGES_PER_SHARE = 2
CHALLENGE_SPAN = 64 * 1024


def challenges_for(secret: bytes, key: bytes, share) -> list:
    """[Challenge] a verifier can ask later (their nonces derive from `key`).

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
        hasher = blake3.blake3(nonce)
        hasher.update(memoryview(share)[offset:offset + span])  # no copy of the share
        expected = hasher.digest()
        out.append(Challenge(offset, span, expected[:16].hex()))
    return out


def challenge_nonce(secret: bytes, key: bytes, index: int) -> bytes:
    return hmac.new(secret, b"flud-verify-v1" + key + bytes([index]), hashlib.sha256).digest()[:16]


@dataclass
class PreparedSegment:
    key: bytes            # convergent AES key
    digest: bytes         # of the plaintext (the convergence's digest)
    length: int           # plaintext bytes
    block_length: int
    shares: list          # the k primary shares (views of the ciphertext), then the parity
    share_keys: list
    challenges: dict      # share key hex -> challenges
    coded: bool = True    # False until add_parity: only the primaries so far
    method: Optional[str] = None  # compressed before it was encrypted (None: as it is)
    stored: int = 0       # bytes its blocks hold: the compressed length, else `length`

    @property
    def buffered(self) -> int:
        return sum(len(s) for s in self.shares if s is not None)


def prepare_primaries(secret: bytes, coder, data, challenges: bool = True,
                      convergence=file_convergence, squeeze=None) -> PreparedSegment:
    """The first half of a segment's preparing (add_parity is the second):
    encrypt and hash the k primary shares (a writable `data` is encrypted in
    place and becomes them: no second buffer), so their STOREs can start
    while the parity is coded.
    challenges=False: a share of an extent stream (its stream has them).
    convergence: (digest, key) of the plaintext (crypto.segment_convergence
    for a large file's segment). squeeze(data): (method, the bytes to store)
    once the key is known (a large file's segment compressed in place; the
    key still comes from the plaintext)."""
    digest, key = convergence(secret, data)
    length, method = len(data), None
    if squeeze is not None:
        method, data = squeeze(data)
    if isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly):
        crypt_ctr_in_place(key, data)
        ciphertext = data
    else:
        ciphertext = encrypt_ctr(key, data)
    block_length, primaries = coder.split(ciphertext)
    prep = PreparedSegment(key, digest, length, block_length, [], [], {}, coded=False,
                           method=method, stored=len(data))
    _add_shares(secret, prep, primaries, challenges)
    return prep


def add_parity(secret: bytes, coder, prep: PreparedSegment,
               challenges: bool = True, out=None) -> PreparedSegment:
    """The second half: the parity shares of the primaries, hashed (coded
    into the buffers `out` where given: see SegmentCoder.parity)."""
    _add_shares(secret, prep, coder.parity(prep.shares[:coder.k], out), challenges)
    prep.coded = True
    return prep


def _add_shares(secret: bytes, prep: PreparedSegment, shares: list, challenges: bool) -> None:
    keys = [blake3.blake3(s).digest() for s in shares]
    prep.shares.extend(shares)
    prep.share_keys.extend(keys)
    if challenges:
        prep.challenges.update((k.hex(), challenges_for(secret, k, s))
                               for k, s in zip(keys, shares))


@defer.inlineCallbacks
def fetch_segment(network, pool, coder, secret, record: SegmentFetch, report=None):
    """The segment's stored bytes, decrypted, from its holders
    (records.SegmentFetch: whole shares, or an extent's blocks at their
    offsets in its streams): its plaintext, unless it was compressed
    (record.method; restore/block_restore.py decompresses those)."""
    pieces = yield fetch_segment_pieces(network, pool, coder, secret, record, report)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


@defer.inlineCallbacks
def fetch_segment_pieces(network, pool, coder, secret, record, report=None):
    """Like fetch_segment, but the bytes come as a list of buffers in
    order: when the k primary shares arrived, each is decrypted where it
    landed, so a segment costs its shares' memory and nothing more. (A large
    file's full segments are restored block by block instead: blocks.py.)"""
    k = coder.k
    # Primaries first (no decode), but nodes this run found failed last.
    failed = network.failed
    holders = sorted(record.holders, key=lambda h: (bytes.fromhex(h.node) in failed, h.index))
    waiting = iter(holders)
    got = {}
    failures = []

    def ask(holder):
        d = network.retrieve(bytes.fromhex(holder.node), bytes.fromhex(holder.key),
                         *holder.retrieve_range(record.block_length))
        d.addCallbacks(lambda data: ("ok", holder, data), lambda f: ("err", holder, f))
        return d

    def failed(holder, why):
        failures.append((holder.node, holder.key, why))
        if report is not None:
            report(holder.node, holder.key, why)
        nxt = next(waiting, None)
        if nxt is not None:
            active.append(ask(nxt))

    key = bytes.fromhex(record.key)
    active = [ask(h) for h in (next(waiting, None) for _ in range(k)) if h is not None]
    while active:
        results = yield gather(active)
        active = []
        arrived = []
        for _, (status, holder, value) in results:
            if status == "ok":
                arrived.append((holder, value))
            else:
                failed(holder, value.getErrorMessage())
        # Hashes checked (and, with k good shares, decoded and decrypted) in
        # the pool: the reactor thread only receives.
        fits, pieces = yield pool.run(_check_and_open, coder, arrived, dict(got), record, key)
        for (holder, value), fit in zip(arrived, fits):
            if fit:
                got[holder.index] = value
            else:
                failed(holder, "corrupt (hash mismatch)")
        if pieces is not None:
            for d in active:  # asked for a share that failed: not needed now
                d.cancel()
            return pieces
    raise FetchFailed(f"only {len(got)} of the {k} shares needed for a segment could "
                      f"be fetched: " + "; ".join(f"{n[:12]}: {w}" for n, _, w in failures))


def _check_and_open(coder, arrived, got, record, key):
    """([does each arrived share match its hash], the plaintext pieces once k
    shares do, else None).

    Every share that is used matched its BLAKE3 key or block hash, and those
    come from the authenticated manifest: the ciphertext is exactly what was
    stored, so no second hash of the plaintext is needed."""
    fits = [holder.fits(value) for holder, value in arrived]
    got.update((holder.index, value) for (holder, value), fit in zip(arrived, fits) if fit)
    if len(got) < coder.k:
        return fits, None
    return fits, _decode_and_decrypt(coder, got, record, key)


def _writable(share) -> bool:
    """A buffer the answer owns (a large one comes as a writable memoryview)."""
    return isinstance(share, bytearray) or (isinstance(share, memoryview) and not share.readonly)


def _decode_and_decrypt(coder, got, record, key) -> list:
    """The stored bytes, decrypted (still compressed if the record says so)."""
    length, block_length = record.stored_length, record.block_length
    primaries = [got.get(i) for i in range(coder.k)]
    if all(_writable(p) and len(p) == block_length for p in primaries):
        # Systematic: the primaries are the ciphertext, block after block.
        pieces = []
        for i, share in enumerate(primaries):
            take = min(block_length, length - i * block_length)
            if take <= 0:
                break
            view = memoryview(share)[:take]
            crypt_ctr_in_place(key, view, i * block_length)
            pieces.append(view)
        return pieces
    return [decrypt_ctr(key, coder.decode(got, length))]
