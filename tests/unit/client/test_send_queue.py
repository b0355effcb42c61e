"""The TLS send queues inside the memory budget: an allowance reserved at
the start of a run, held bytes only beyond it."""
from flud.client.home import create_home
from flud.client.budget_plan import SEND_ALLOWANCE_MAX
from flud.client.network import Network, SendQueue
from flud.memory import MemoryMonitor
from tests.unit.client.fakes import FakeReactor

MIB = 1024 * 1024


def test_queued_ciphertext_comes_out_of_the_allowance_then_is_held():
    monitor = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=10 * MIB)
    transfer = monitor.transfer("network", "TLS send queues")
    allowance = 1_000_000
    transfer.reserve(allowance, "allowance")
    queue = SendQueue(transfer)
    queue.hold(600_000, "tls")
    assert monitor.buffered_bytes == allowance  # inside the allowance: nothing more counted
    queue.hold(600_000, "tls")
    assert monitor.buffered_bytes == 1_200_000 and transfer.held("tls") == 200_000
    queue.release(900_000, "tls")  # the held part goes first
    assert monitor.buffered_bytes == allowance and transfer.held("tls") == 0
    assert transfer.reserved("tls") == 300_000
    assert transfer.reserved("allowance") == allowance - 300_000
    queue.release(300_000, "tls")
    assert transfer.reserved("allowance") == allowance == transfer.current_bytes
    queue.close()
    assert queue.closed and monitor.buffered_bytes == 0


def test_small_moves_reach_the_transfer_in_steps_and_a_drain_at_once():
    from flud.client.network import SEND_SYNC_STEP

    monitor = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=10 * MIB)
    transfer = monitor.transfer("network", "TLS send queues")
    transfer.reserve(MIB, "allowance")
    queue = SendQueue(transfer)
    queue.hold(1000, "tls")
    queue.hold(1000, "tls")
    assert queue.queued == 2000 and transfer.reserved("tls") == 0  # not yet
    assert queue.room() == MIB - 2000 - MIB // 2  # the wire sees it at once
    queue.hold(SEND_SYNC_STEP, "tls")
    assert transfer.reserved("tls") == SEND_SYNC_STEP + 2000
    queue.release(SEND_SYNC_STEP + 1000, "tls")
    assert transfer.reserved("tls") == 1000
    queue.release(1000, "tls")  # drained: exact
    assert transfer.reserved("tls") == 0 and transfer.reserved("allowance") == MIB
    assert monitor.buffered_bytes == MIB


def test_count_sends_reserves_a_share_of_the_budget_for_the_run(tmp_path):
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    network = Network(FakeReactor(), home.path, [])
    for budget, allowance in ((64 * MIB, SEND_ALLOWANCE_MAX), (16 * MIB, MIB)):
        monitor = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=budget)
        queue = network.count_sends(monitor)
        assert network.net.local.send_queue is queue
        assert monitor.buffered_bytes == allowance == queue.transfer.reserved("allowance")
        queue.close()
        assert monitor.buffered_bytes == 0
    # a budget already taken: the queues are counted on top, nothing waits
    monitor = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=16 * MIB)
    monitor.reserve(16 * MIB)
    queue = network.count_sends(monitor)
    assert monitor.waiting_reservations == 0 and queue.transfer.current_bytes == 0
    from flud.client.network import SEND_SYNC_STEP
    queue.hold(SEND_SYNC_STEP, "tls")
    assert monitor.buffered_bytes == 16 * MIB + SEND_SYNC_STEP
    network.close()


def test_the_connections_state_is_reserved_per_known_node_within_a_share(tmp_path):
    from flud.protocol.client import NodeAddress
    from flud.client.budget_plan import CONNECTION_BYTES, CONNECTIONS_SHARE

    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    network = Network(FakeReactor(), home.path, [])
    for i in range(50):
        network.nodes[bytes([i]) * 32] = NodeAddress(bytes([i]) * 32, "127.0.0.1", 1000 + i)
    monitor = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=64 * MIB)
    queue = network.count_sends(monitor)
    assert queue.connections == 50 * CONNECTION_BYTES
    assert monitor.buffered_bytes == SEND_ALLOWANCE_MAX + 50 * CONNECTION_BYTES
    # not a transfer's buffers: the send queues' transfer holds the allowance only
    assert queue.transfer.current_bytes == monitor.peak_transfer_bytes == SEND_ALLOWANCE_MAX
    queue.close()
    assert monitor.buffered_bytes == 0
    small = MemoryMonitor(rss_reader=lambda: 0, budget_bytes=16 * MIB)
    queue = network.count_sends(small)
    assert queue.connections == 16 * MIB // CONNECTIONS_SHARE
    queue.close()
    assert small.buffered_bytes == 0
    network.close()


def test_the_network_share_always_leaves_room_for_what_the_run_keeps():
    from flud.client.budget_plan import network_share

    assert sum(network_share(64 * MIB, 50, keep=4 * MIB).values()) < 60 * MIB
    assert network_share(5 * MIB, 50, keep=4 * MIB) == {"allowance": 5 * MIB // 16,
                                                         "connections": 5 * MIB // 8}
    # the room left beside the kept bytes binds: the allowance first
    room = 4 * MIB + MIB // 2
    assert network_share(room, 50, keep=4 * MIB) == {"allowance": room // 16,
                                                     "connections": MIB // 2 - room // 16}
    assert network_share(4 * MIB, 50, keep=4 * MIB) == {"allowance": 0, "connections": 0}
    assert network_share(2 * MIB, 50, keep=4 * MIB) == {"allowance": 0, "connections": 0}
