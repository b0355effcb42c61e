"""The TLS send queues inside the memory budget: an allowance reserved at
the start of a run, held bytes only beyond it."""
from flud.client.home import create_home
from flud.client.network import SEND_ALLOWANCE_MAX, Network, SendQueue
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
