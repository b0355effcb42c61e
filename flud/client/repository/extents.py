"""A large file's extents: one streamed STORE per node per extent.

An extent is up to EXTENT_BYTES of a file, in consecutive segments. Its n
share streams go to n distinct nodes (rendezvous rank of its first block);
stream i is share i of every segment, back to back. A node so pays one STORE
(one file, one fsync, one index row) per extent instead of one per segment:
on a 50-node testnet that fixed price was half of a node's CPU per byte.

A segment's shares are fed to the streams as views of the segment's own
buffers and let go once every stream has taken its share (it is in TLS
records on its way), so a file still holds one segment's footprint. A
stream's key, BLAKE3 of the whole stream, is known only at its end: the
STORE carries it last (KIND_STREAMED_SHARE) and the node checks it before
the share becomes visible. Each block's own BLAKE3 is recorded too, so a
restore fetches a segment's blocks by range and checks each one.

A node that fails, refuses or stalls fails the extent; the backup then sends
the extent again from its first segment to nodes that have not failed.
"""
import logging

import blake3
from twisted.internet import defer
from twisted.python.failure import Failure

from flud.client.records import Challenge
from flud.client.repository.segments import CHALLENGE_SPAN, challenge_nonce
from flud.errors import FludError

log = logging.getLogger("flud.client")

# 32 MiB of a file: a node's share of it is 8 MiB at 4-of-8 (32 MiB / k), one STORE
# (against 16 with a STORE per 2 MiB segment). Larger extents save little
# more and cost more on a retry.
EXTENT_BYTES = 32 * 1024 * 1024
MAX_EXTENT_ATTEMPTS = 3
# A stream that takes nothing for this long fails its extent (a node that
# hangs without closing its connection would otherwise stall the file).
STALL_TIMEOUT = 60.0
BLOCK_HASH = 16  # bytes of each block's BLAKE3 kept in the manifest


class ExtentFailed(FludError):
    """A node failed, refused or stalled one of an extent's streams: the
    extent is sent again (to nodes that have not failed). newly_failed: how
    many nodes this attempt took out of service that were in it before."""

    code = "EXTENT_FAILED"

    def __init__(self, message: str, newly_failed: int = 0):
        super().__init__(message)
        self.newly_failed = newly_failed


def segments_per_extent(segment_size: int) -> int:
    return max(1, EXTENT_BYTES // segment_size)


def stream_id(first_block_key: bytes, share_index: int) -> bytes:
    """What a stream's challenge nonces derive from: known before its key."""
    return first_block_key + bytes([share_index])


class StreamHashes:
    """A share stream's hashes, built as its blocks go by: its key, and two
    VERIFY challenges (the whole stream; a CHALLENGE_SPAN spot check). The
    nonces come from the user secret and are recorded with the challenges."""

    def __init__(self, secret: bytes, identity: bytes, size: int):
        self.size = size
        self.nonces = (challenge_nonce(secret, identity, 0), challenge_nonce(secret, identity, 1))
        self.key = blake3.blake3()
        self.whole = blake3.blake3(self.nonces[0])
        self.span = min(size, CHALLENGE_SPAN)
        self.span_offset = int.from_bytes(self.nonces[1][:8], "big") % (size - self.span + 1)
        self.spot = blake3.blake3(self.nonces[1])
        self.position = 0

    def update(self, block) -> None:
        self.key.update(block)
        self.whole.update(block)
        start = max(self.span_offset, self.position)
        end = min(self.span_offset + self.span, self.position + len(block))
        if start < end:
            self.spot.update(block[start - self.position:end - self.position])
        self.position += len(block)

    def challenges(self) -> list:
        """[Challenge] with their nonces: the whole stream, then the spot check."""
        return [Challenge(0, self.size, self.whole.digest()[:16].hex(), self.nonces[0].hex()),
                Challenge(self.span_offset, self.span, self.spot.digest()[:16].hex(),
                          self.nonces[1].hex())]


class ExtentUpload:
    """The n streamed STOREs of one extent."""

    def __init__(self, network, nodes, size, clock):
        self.network = network
        self.nodes = nodes
        self.size = size
        self.clock = clock
        self.streams = []
        # Once cancelled, what its streams fail with is our doing: the wire
        # fails a cancelled stream's waiting feeds, and those nodes did no wrong.
        self.cancelled = False
        self.newly_failed = 0   # nodes this upload took out of service

    @defer.inlineCallbacks
    def open(self):
        results = yield defer.DeferredList(
            [self.network.open_store(node, self.size) for node in self.nodes],
            consumeErrors=True)
        self.streams = [value if ok else None for ok, value in results]
        # Every node that refused is blamed, not only the first: the next
        # attempt must not be placed on another of them (with 4 of 16 nodes
        # freshly stopped, one blamed per attempt ran out of attempts).
        refused = [(node, value) for (ok, value), node in zip(results, self.nodes) if not ok]
        for node, value in refused:
            self._blame(node, value)
        if refused:
            self.cancel()
            node, value = refused[0]
            raise ExtentFailed(f"node {node.hex()[:12]}: {value.getErrorMessage()}",
                               self.newly_failed)

    def feed(self, shares, indexes) -> defer.Deferred:
        """Fires once stream i has taken shares[i], for every i in indexes."""
        return self._all({i: self.streams[i].feed(shares[i]) for i in indexes}, "took nothing")

    def finish(self, keys) -> defer.Deferred:
        """Fires once every node has committed its stream under its key."""
        return self._all({i: s.finish(keys[i]) for i, s in enumerate(self.streams)},
                         "did not commit")

    def cancel(self) -> None:
        self.cancelled = True
        for stream in self.streams:
            if stream is not None:
                stream.cancel()

    def _all(self, waiting: dict, stalled_means: str) -> defer.Deferred:
        """One Deferred for the streams' Deferreds: the first failure (or a
        stall) fails it, names its node and cancels the extent."""
        result = defer.Deferred()
        left = set(waiting)

        def fail(why, node):
            if not result.called:
                if timer.active():
                    timer.cancel()
                result.errback(ExtentFailed(f"node {node.hex()[:12]}: {why}", self.newly_failed))
                self.cancel()

        def one_done(outcome, i):
            left.discard(i)
            node = self.nodes[i]
            if isinstance(outcome, Failure):
                self._blame(node, outcome)
                fail(outcome.getErrorMessage(), node)
            elif not left and not result.called:
                timer.cancel()
                result.callback(None)

        def stalled():
            slow = min(left)
            if self.nodes[slow] not in self.network.failed:
                self.newly_failed += 1
            self.network.mark_failed(self.nodes[slow], f"{stalled_means} in {STALL_TIMEOUT:.0f} s")
            fail(f"{stalled_means} in {STALL_TIMEOUT:.0f} s", self.nodes[slow])

        timer = self.clock.callLater(STALL_TIMEOUT, stalled)
        for i, d in waiting.items():
            d.addBoth(one_done, i)
        if not waiting:
            timer.cancel()
            result.callback(None)
        return result

    def _blame(self, node, failure) -> None:
        if not self.cancelled:
            was_failed = node in self.network.failed
            if self.network.blame(node, failure) and not was_failed:
                self.newly_failed += 1
