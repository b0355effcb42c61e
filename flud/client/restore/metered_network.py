"""The bytes a restore fetched, counted where they arrive.

A restore resumed with `--overwrite if-changed` is judged by what it did not
fetch again, so the figure is measured, not estimated: every RETRIEVE answer
that came back through the job's network is counted (share bytes as the
nodes sent them, before any decode), whichever part of the restore asked.
"""
from zope.interface import implementer

from flud.client.interfaces import INetwork
from flud.client.node_requests import NodeRequests


@implementer(INetwork)
class MeteredNetwork(NodeRequests):
    """An INetwork that passes every call to `network` and counts the bytes
    of the RETRIEVE answers (`fetched_bytes`, `fetches`)."""

    def __init__(self, network):
        self._network = network
        self.fetched_bytes = 0
        self.fetches = 0

    @property
    def client_id(self):
        return self._network.client_id

    @property
    def nodes(self):
        return self._network.nodes

    @property
    def failed(self):
        return self._network.failed

    @property
    def health(self):
        return self._network.health

    def alive_ids(self):
        return self._network.alive_ids()

    def place(self, object_id, count):
        return self._network.place(object_id, count)

    def call(self, node_id, method, *args, **kwargs):
        d = self._network.call(node_id, method, *args, **kwargs)
        if method == "retrieve":
            d.addCallback(self._count)
        return d

    def _count(self, data):
        self.fetches += 1
        self.fetched_bytes += len(data)
        return data

    def open_store(self, node_id, size):
        return self._network.open_store(node_id, size)

    def cancel(self, node_id, d):
        return self._network.cancel(node_id, d)

    def blame(self, node_id, error):
        return self._network.blame(node_id, error)

    def mark_failed(self, node_id, why=None):
        return self._network.mark_failed(node_id, why)

    def count_sends(self, monitor, plan=None):
        return self._network.count_sends(monitor, plan)

    def close(self):
        return self._network.close()
