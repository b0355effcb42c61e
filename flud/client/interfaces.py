"""What a client job's parts ask of the network of storage nodes.

Two implementations: client.network.Network (TLS connections to real
nodes) and the in-memory network of the unit tests
(tests/unit/client/fakes.py), both checked against this with verifyObject.
Finding the nodes (Network.discover) is the composition root's business,
not the parts': it is not here.
"""
from zope.interface import Attribute, Interface


class INetwork(Interface):
    client_id = Attribute("bytes: this client's id, its owner id on every node")
    nodes = Attribute("{node id: the node}: every node this run knows of")
    failed = Attribute("set of node ids that failed this run: no more work goes to them")
    health = Attribute("NodeHealth: why each failed node failed (client/node_health.py)")

    def alive_ids():
        """[node id] of the known nodes that have not failed this run."""

    def place(object_id, count):
        """The `count` alive nodes that rank highest for object_id
        (rendezvous order, client/placement.py)."""

    def call(node_id, method, *args, **kwargs):
        """Deferred: the node's answer to one request, by the name of its
        Peer method: the seam under the typed requests below (a fake
        answers here), never called by a job."""

    def store(node_id, key, data, kind):
        """Deferred: the node took a share (or a tar, KIND_ARCHIVE)."""

    def retrieve(node_id, key, offset, length, into):
        """Deferred[bytes]: a range of a share (into: a memoryview it may
        land in)."""

    def verify(node_id, key, nonce, offset, length):
        """Deferred[bytes]: the node's digest of nonce + a share's range."""

    def delete(node_id, key):
        """Deferred: the share is gone from the node."""

    def root_put(node_id, record):
        """Deferred: the node keeps our sealed root record."""

    def root_get(node_id):
        """Deferred[bytes]: the sealed root record the node holds for us."""

    def stats(node_id):
        """Deferred[dict]: the node's STATS."""

    def open_store(node_id, size):
        """Deferred[a streamed STORE of `size` bytes open on that node]:
        feed(bytes), finish(key), cancel()."""

    def cancel(node_id, d):
        """Abandon a request made with call() (its Deferred fails CANCELLED)."""

    def blame(node_id, error):
        """Count a request's error against its node; True if the node is now
        failed for the rest of the run."""

    def mark_failed(node_id, why=None):
        """The node is failed for the rest of the run (it stalled, say)."""

    def count_sends(monitor, plan=None):
        """Count what the connections queue on the memory monitor for this
        run, reserving as its BudgetPlan says (client/budget_plan.py);
        returns what to close() when the run is over."""

    def close():
        """Let every connection go."""
