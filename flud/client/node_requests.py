"""The requests a client job makes of one node, typed: store, retrieve,
verify, delete, root_put, root_get, stats. Each is one call() of the node's method
of that name (protocol/client.py's Peer); Network and every fake of the
tests inherit them, so a fake answers (or fails) a request in one place,
its call(), and no job names a remote method as a string."""
from flud.protocol.messages import KIND_SHARE, TO_END


class NodeRequests:
    """Mixed into an INetwork: needs call(node_id, method, *args, **kwargs)."""

    def store(self, node_id: bytes, key: bytes, data, kind: int = KIND_SHARE):
        """Deferred: the node took `data` under `key` (a share, or a tar:
        KIND_ARCHIVE)."""
        return self.call(node_id, "store", key, data, kind)

    def retrieve(self, node_id: bytes, key: bytes, offset: int = 0, length: int = TO_END,
                 into=None):
        """Deferred[bytes]: `length` bytes of a share from `offset`; an
        answer that fits in `into` (a writable memoryview) lands there."""
        if into is None:
            return self.call(node_id, "retrieve", key, offset, length)
        return self.call(node_id, "retrieve", key, offset, length, into=into)

    def verify(self, node_id: bytes, key: bytes, nonce: bytes, offset: int, length: int):
        """Deferred[bytes]: the node's digest of nonce + a share's range."""
        return self.call(node_id, "verify", key, nonce, offset, length)

    def delete(self, node_id: bytes, key: bytes):
        return self.call(node_id, "delete", key)

    def root_put(self, node_id: bytes, record: bytes):
        return self.call(node_id, "root_put", record)

    def root_get(self, node_id: bytes):
        """Deferred[bytes]: the sealed root record the node holds for us."""
        return self.call(node_id, "root_get")

    def stats(self, node_id: bytes):
        """Deferred[dict]: the node's STATS (any answer renews our lease)."""
        return self.call(node_id, "stats")
