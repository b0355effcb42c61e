"""What one run holds against each node: the one place that decides when a
node is failed (no more work goes to it this run) and when it is not.

A node is failed for what it did: it refused, hung up, or stalled. What the
client cancelled itself (a sibling stream of a failed extent, a hedge that
lost) is never held against the node that was serving it. A stream the
node found not to match its key is a strike, not a verdict: the client's
own bytes may be what was wrong, so the node is failed at its second.
"""
import logging

from twisted.python.failure import Failure

from flud.protocol.errors import ErrorCode, RemoteError

log = logging.getLogger("flud.client")

MISMATCH_STRIKES = 2


def _error_of(error) -> BaseException:
    return error.value if isinstance(error, Failure) else error


def is_quota(error) -> bool:
    err = _error_of(error)
    return isinstance(err, RemoteError) and err.code == ErrorCode.QUOTA


def is_cancel(error) -> bool:
    err = _error_of(error)
    return isinstance(err, RemoteError) and err.code == ErrorCode.CANCELLED


class NodeHealth:
    def __init__(self):
        self.failed = set()      # node ids no work goes to for the rest of the run
        self.why = {}            # node id -> why it failed, as first said
        self._mismatches = {}    # node id -> streams it found not matching their key
        # node id -> its QUOTA message: it refused to hold more for us (docs/quotas.md).
        # Not failed: it still serves what it holds; nothing new is placed there.
        self.quota = {}

    def blame(self, node_id: bytes, error) -> bool:
        """Count `error` (an exception or Failure from that node's request)
        against the node; True if the node is now failed."""
        err = _error_of(error)
        if is_cancel(err):
            return False
        if is_quota(err):
            if node_id not in self.quota:
                log.warning("node %s holds no more for this home (%s); placing elsewhere",
                            node_id.hex()[:12], err.message)
            self.quota[node_id] = err.message
            return True
        if isinstance(err, RemoteError) and err.code == ErrorCode.HASH_MISMATCH:
            strikes = self._mismatches.get(node_id, 0) + 1
            self._mismatches[node_id] = strikes
            if strikes < MISMATCH_STRIKES:
                log.warning("node %s: %s (strike %d of %d)", node_id.hex()[:12], err.message,
                            strikes, MISMATCH_STRIKES)
                return False
        self.mark_failed(node_id, err)
        return True

    def summary(self) -> dict:
        """What a run's --json summary says of its nodes: the ids failed
        for the rest of it (hex), and how many uploads a node refused as
        not matching their key (HASH_MISMATCH strikes)."""
        return {"failed_nodes": sorted(node_id.hex() for node_id in self.failed),
                "hash_mismatches": sum(self._mismatches.values())}

    def quota_note(self) -> str:
        """What to add to a 'too few nodes' error when nodes refused for quota."""
        if not self.quota:
            return ""
        node, message = next(iter(self.quota.items()))
        return (f"; {len(self.quota)} node(s) refused with QUOTA (node {node.hex()[:12]}: "
                f"QUOTA: {message})")

    def mark_failed(self, node_id: bytes, why=None) -> None:
        if node_id not in self.failed:
            self.why[node_id] = str(why) if why is not None else "failed"
            reason = f": {why}" if why is not None else ""
            log.warning("node %s failed; using others%s", node_id.hex()[:12], reason)
        self.failed.add(node_id)
