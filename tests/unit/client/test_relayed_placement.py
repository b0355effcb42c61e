"""Placement takes nodes reached directly first, relayed ones after them
(flud/client/network.py Network.place / relayed), and a record with only a
relay hint is dialled through its relay (NodeRecord.dial_address)."""
from twisted.internet.testing import MemoryReactorClock

from flud.client.network import Network
from flud.client.placement import rank
from flud.keys import Identity
from flud.protocol.client import NodeAddress
from flud.protocol.node_record import Address, sign_record


def test_relayed_nodes_come_after_every_direct_one(tmp_path):
    net = Network(MemoryReactorClock(), str(tmp_path / "home"), [])
    ids = [bytes([i]) * 32 for i in range(1, 11)]
    relayed = set(ids[:4])
    for node_id in ids:
        host = "relay:" + (b"\xee" * 32).hex() if node_id in relayed else "198.18.1.9"
        net.nodes[node_id] = NodeAddress(node_id, host, 0 if node_id in relayed else 7400)
    object_id = b"\x42" * 32
    placed = net.place(object_id, 8)
    assert placed[:6] == [n for n in rank(object_id, ids) if n not in relayed]
    assert set(placed[6:]) <= relayed and len(placed) == 8
    assert net.place(object_id, 6) == placed[:6]      # enough direct ones: no relay used
    net.net.close()


def test_a_relay_only_record_is_dialled_through_its_relay():
    identity = Identity.generate()
    relay_id = b"\x07" * 32
    only_relay = sign_record(identity, 1, 10 ** 10, [Address("relay", relay_id=relay_id)])
    assert only_relay.first_tcp() is None
    assert only_relay.dial_address() == ("relay:" + relay_id.hex(), 0)
    both = sign_record(identity, 2, 10 ** 10, [Address("relay", relay_id=relay_id),
                                                Address.tcp("198.18.1.1", 7400)])
    assert both.dial_address() == ("198.18.1.1", 7400)
