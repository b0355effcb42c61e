import random
import sys

import pytest
from twisted.internet import defer, task

from flud.memory import DEFAULT_BUDGET, LOG_HEADER, SNAPSHOT_TRANSFER_LIMIT, MemoryMonitor

MiB = 1 << 20


class FakeRSS:
    def __init__(self, value=10 * MiB):
        self.value = value
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.value


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def rss():
    return FakeRSS()


@pytest.fixture
def monitor(clock, rss):
    return MemoryMonitor(clock=clock.seconds, rss_reader=rss, budget_bytes=100)


def fired(d):
    box = []
    d.addBoth(box.append)
    return box


# --- transfers and buffer accounting -------------------------------------------


def test_default_budget_is_64_mib():
    assert DEFAULT_BUDGET == 64 * MiB
    assert MemoryMonitor(rss_reader=FakeRSS()).budget_bytes == 64 * MiB


def test_hold_and_release_track_current_and_peak(monitor):
    upload = monitor.transfer("upload", "big.iso")
    upload.hold(30, "segment")
    upload.hold(20, "shares")
    upload.release(30, "segment")
    assert upload.current_bytes == 20 and upload.peak_bytes == 50
    store = monitor.transfer("store", "tar-1")
    store.hold(40, "frame")
    assert monitor.buffered_bytes == 60
    assert monitor.peak_buffered_bytes == 60
    assert monitor.active_transfers == 2
    assert monitor.peak_transfer_bytes == 50


def test_close_releases_what_is_left_and_keeps_the_peak(monitor):
    with monitor.transfer("download", "f") as download:
        download.hold(70, "block")
    assert download.closed
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert monitor.finished_transfers == 1
    assert monitor.peak_transfer_bytes == 70
    download.close()  # idempotent
    assert monitor.finished_transfers == 1


@pytest.mark.parametrize(
    "action, message",
    [
        (lambda t: t.release(1, "never held"), "only 0 counted"),
        (lambda t: t.release(11, "buf"), "only 10 counted"),
        (lambda t: t.hold(-1, "buf"), ">= 0"),
        (lambda t: t.unreserve(1, "buf"), "only 0 counted"),
    ],
)
def test_accounting_mistakes_are_refused(monitor, action, message):
    transfer = monitor.transfer("upload", "x")
    transfer.hold(10, "buf")
    with pytest.raises(ValueError, match=message):
        action(transfer)
    assert monitor.buffered_bytes == 10


def test_closed_transfer_refuses_new_bytes(monitor):
    transfer = monitor.transfer("tar", "t")
    transfer.close()
    with pytest.raises(ValueError, match="closed"):
        transfer.hold(1, "buf")
    with pytest.raises(ValueError, match="closed"):
        transfer.reserve(1, "buf")


def test_transfer_needs_a_kind(monitor):
    with pytest.raises(ValueError):
        monitor.transfer("", "x")


def test_snapshot_lists_biggest_transfers_first_capped(monitor, clock):
    transfers = [monitor.transfer("store", f"t{i}") for i in range(SNAPSHOT_TRANSFER_LIMIT + 5)]
    for size, transfer in enumerate(transfers):
        transfer.hold(size, "frame")
    clock.advance(2)
    snapshot = monitor.snapshot()
    assert len(snapshot["transfers"]) == SNAPSHOT_TRANSFER_LIMIT
    assert snapshot["transfers_omitted"] == 5
    first = snapshot["transfers"][0]
    assert first == {
        "kind": "store",
        "name": f"t{SNAPSHOT_TRANSFER_LIMIT + 4}",
        "age": 2,
        "bytes": SNAPSHOT_TRANSFER_LIMIT + 4,
        "peak_bytes": SNAPSHOT_TRANSFER_LIMIT + 4,
        "held": {"frame": SNAPSHOT_TRANSFER_LIMIT + 4},
        "reserved": {},
    }
    for key in (
        "rss", "peak_rss", "static_rss", "buffered_bytes", "peak_buffered_bytes",
        "peak_transfer_bytes", "active_transfers", "finished_transfers", "budget_bytes",
    ):
        assert key in snapshot
    assert snapshot["active_transfers"] == SNAPSHOT_TRANSFER_LIMIT + 5


# --- RSS ----------------------------------------------------------------------------


def test_sample_and_static_footprint(monitor, rss):
    assert monitor.rss == 0 and rss.reads == 0
    assert monitor.mark_static() == 10 * MiB
    rss.value = 25 * MiB
    monitor.sample()
    rss.value = 15 * MiB
    monitor.sample()
    assert (monitor.static_rss, monitor.rss, monitor.peak_rss) == (10 * MiB, 15 * MiB, 25 * MiB)


def test_psutil_is_imported_only_when_sampling(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # importing it now fails
    monitor = MemoryMonitor()
    with monitor.transfer("upload", "x") as transfer:
        transfer.hold(5, "buf")
    assert monitor.snapshot()["finished_transfers"] == 1
    with pytest.raises(ImportError):
        monitor.sample()


def test_default_reader_reports_this_process():
    monitor = MemoryMonitor()
    assert monitor.sample() > MiB


def test_csv_log(monitor, clock, rss, tmp_path):
    path = tmp_path / "memory.csv"
    monitor.open_log(path)
    transfer = monitor.transfer("upload", "x")
    transfer.hold(40, "buf")
    clock.advance(1.5)
    monitor.sample()
    transfer.release(40, "buf")
    clock.advance(0.25)
    monitor.sample()
    monitor.close_log()
    monitor.sample()  # no log open: nothing written
    assert path.read_text().splitlines() == [
        LOG_HEADER,
        f"1.500,{10 * MiB},1,40,40,40",
        f"1.750,{10 * MiB},1,0,40,40",
    ]


def test_sampling_follows_the_injected_clock(monitor, clock, rss):
    monitor.start_sampling(clock, interval=0.25)
    assert rss.reads == 1  # samples at once
    clock.advance(0.25)
    clock.advance(0.25)
    assert rss.reads == 3
    monitor.stop_sampling()
    clock.advance(10)
    assert rss.reads == 3
    monitor.stop_sampling()  # idempotent


# --- the budget -----------------------------------------------------------------------


def test_reserve_fires_at_once_when_it_fits(monitor):
    assert fired(monitor.reserve(60)) == [60]
    assert monitor.buffered_bytes == monitor.reserved_bytes == 60
    assert monitor.peak_buffered_bytes == 60


def test_reserve_waits_until_unreserve_makes_room(monitor):
    monitor.reserve(60)
    second = fired(monitor.reserve(50))
    assert second == [] and monitor.waiting_reservations == 1
    monitor.unreserve(5)  # 55 + 50 is still over 100
    assert second == []
    monitor.unreserve(55)
    assert second == [50] and monitor.reserved_bytes == 50


def test_held_bytes_count_against_the_budget(monitor):
    transfer = monitor.transfer("retrieve", "x")
    transfer.hold(80, "buf")
    waiting = fired(monitor.reserve(30))
    assert waiting == []
    transfer.release(80, "buf")
    assert waiting == [30]


def test_waiters_are_served_first_in_first_out(monitor):
    monitor.reserve(90)
    big, small = fired(monitor.reserve(60)), fired(monitor.reserve(5))
    assert small == []  # would fit, but must not overtake the big one
    monitor.unreserve(90)
    assert big == [60] and small == [5]


def test_oversized_request_waits_for_an_empty_budget_then_runs_alone(monitor):
    monitor.reserve(10)
    huge = fired(monitor.reserve(250))
    assert huge == []
    monitor.unreserve(10)
    assert huge == [250]
    after = fired(monitor.reserve(1))
    assert after == []
    monitor.unreserve(250)
    assert after == [1]


def test_cancelled_reservation_leaves_the_queue(monitor):
    monitor.reserve(100)
    first = monitor.reserve(50)
    second = fired(monitor.reserve(50))
    first.cancel()
    assert fired(first)[0].check(defer.CancelledError)
    assert monitor.waiting_reservations == 1
    monitor.unreserve(100)
    assert second == [50] and monitor.reserved_bytes == 50


def test_unreserve_more_than_reserved_is_refused(monitor):
    monitor.reserve(10)
    with pytest.raises(ValueError, match="only 10 reserved"):
        monitor.unreserve(11)


def test_transfer_reservations_are_part_of_its_footprint(monitor):
    upload = monitor.transfer("upload", "f")
    assert fired(upload.reserve(60, "segment")) == [60]
    assert upload.current_bytes == 60 and monitor.buffered_bytes == 60
    upload.unreserve(60, "segment")
    assert upload.peak_bytes == 60 and monitor.buffered_bytes == 0


def test_closing_a_transfer_returns_its_budget_and_cancels_its_waiters(monitor):
    upload = monitor.transfer("upload", "f")
    upload.reserve(70, "segment")
    pending = fired(upload.reserve(70, "next segment"))
    other = fired(monitor.reserve(30))
    upload.close()
    assert pending[0].check(defer.CancelledError)
    assert other == [30]
    assert monitor.buffered_bytes == 30 and monitor.waiting_reservations == 0


def test_a_granted_callback_may_reserve_again(monitor):
    granted = []

    def chain(nbytes):
        granted.append(nbytes)
        if len(granted) < 3:
            monitor.reserve(40).addCallback(chain)

    monitor.reserve(40).addCallback(chain)
    assert granted == [40, 40]  # the third does not fit
    monitor.unreserve(40)
    assert granted == [40, 40, 40]


def test_many_concurrent_reservations_stay_under_budget_and_all_finish(clock):
    budget = 10 * MiB
    oversized = 2 * budget
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=FakeRSS(), budget_bytes=budget)
    rng = random.Random(7)
    finished = []
    most_at_once = [0]

    def within_budget():
        # Over the budget only while one oversized request runs alone.
        return monitor.reserved_bytes <= budget or monitor.reserved_bytes == oversized

    def use_then_return(nbytes, transfer, what):
        assert within_budget()
        most_at_once[0] = max(most_at_once[0], monitor.active_transfers - monitor.waiting_reservations)

        def done():
            transfer.unreserve(nbytes, what)
            transfer.close()
            finished.append(nbytes)

        clock.callLater(rng.uniform(0.01, 1.0), done)

    requests = 300
    for i in range(requests):
        # Mostly a few fit at a time; now and then one bigger than the budget.
        nbytes = oversized if i % 97 == 50 else rng.randrange(1, budget // 3)
        transfer = monitor.transfer("upload", f"file{i}")
        transfer.reserve(nbytes, "segment").addCallback(use_then_return, transfer, "segment")
    assert monitor.waiting_reservations > 200
    while len(finished) < requests:
        clock.advance(0.05)
        assert within_budget()
    assert most_at_once[0] > 3  # they did run concurrently
    assert monitor.reserved_bytes == 0 and monitor.buffered_bytes == 0
    assert monitor.active_transfers == 0 and monitor.finished_transfers == requests
    assert monitor.peak_transfer_bytes == oversized
    assert monitor.peak_buffered_bytes == oversized


def test_hand_over_moves_granted_bytes_without_admitting_anyone(monitor):
    pipeline = monitor.transfer("small", "aggregator")
    tar = monitor.transfer("tar", "node-a")
    assert fired(pipeline.reserve(80, "credit")) == [80]
    waiting = fired(monitor.reserve(30))
    pipeline.hand_over(50, "credit", tar, "building")
    assert waiting == []  # still 80 of 100 counted: the bytes never left the budget
    assert (pipeline.reserved("credit"), tar.reserved("building")) == (30, 50)
    assert monitor.buffered_bytes == 80 and tar.peak_bytes == 50
    tar.hand_over(50, "building", to_what="sealed")  # a new label, same transfer
    assert tar.reserved("sealed") == 50 and tar.reserved("building") == 0
    assert tar.as_dict(0)["reserved"] == {"sealed": 50}
    pipeline.unreserve(30, "credit")
    assert waiting == [30]
    tar.close()  # a stored tar: its bytes go back to the budget
    assert monitor.buffered_bytes == 30


def test_hand_over_refuses_what_is_not_there(monitor):
    a, b = monitor.transfer("a", "a"), monitor.transfer("b", "b")
    fired(a.reserve(10, "x"))
    with pytest.raises(ValueError, match="cannot hand over 11 bytes"):
        a.hand_over(11, "x", b)
    with pytest.raises(ValueError, match="cannot hand over"):
        a.hand_over(1, "y", b)
    b.close()
    with pytest.raises(ValueError, match="closed"):
        a.hand_over(5, "x", b)
    other = MemoryMonitor(rss_reader=lambda: 0).transfer("c", "c")
    with pytest.raises(ValueError, match="another monitor"):
        a.hand_over(5, "x", other)
    assert a.reserved("x") == 10 and monitor.buffered_bytes == 10
    a.hand_over(0, "x", a, "z")  # nothing to move: no empty label appears
    assert a.as_dict(0)["reserved"] == {"x": 10}


def test_free_standing_credit_is_handed_to_transfers_and_back(monitor):
    """A producer reserves before it knows which buffer will hold the bytes:
    free-standing, so no transfer's footprint (peak) shows them as data."""
    tar = monitor.transfer("tar", "node-a")
    assert fired(monitor.reserve(60)) == [60]
    waiting = fired(monitor.reserve(50))
    monitor.hand_over(40, tar, "building")
    assert (monitor.buffered_bytes, tar.current_bytes, waiting) == (60, 40, [])
    tar.hand_over(10, "building", monitor)  # back to the free-standing credit
    assert tar.current_bytes == 30 and monitor.buffered_bytes == 60
    with pytest.raises(ValueError, match="only 30 reserved"):
        monitor.hand_over(31, tar, "building")
    monitor.unreserve(30)  # what was not used: now the waiter fits
    assert waiting == [50] and monitor.buffered_bytes == 80


def test_no_admission_defers_grants_to_the_end_of_the_block(monitor):
    a = monitor.transfer("a", "a")
    fired(a.reserve(100, "x"))
    waiting = fired(monitor.reserve(30))
    with monitor.no_admission():
        a.unreserve(50, "x")
        assert waiting == []  # nobody runs halfway through
        a.hand_over(20, "x", a, "y")
    assert waiting == [30]
    assert monitor.buffered_bytes == 80
