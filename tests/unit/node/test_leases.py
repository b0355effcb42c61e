"""The node's lease glue (flud/node/leases.py) on a task.Clock: renewals on
requests (at most one write per RENEW_EVERY), the periodic sweep, the clock
offset file, the wire (an owner's request brings its data back), and the
wall clock's jumps and suspends against a monotonic clock the test drives."""
import random

import pytest
from twisted.internet import defer, task

from flud.node import leases as node_leases
from flud.node.config import CLIENT_RENEWAL_PERIOD, MIN_LEASE, MIN_TRASH, NodeConfig
from flud.node.leases import JUMP_BOUND, RENEW_EVERY, LeaseKeeper, measure_gap, offset_file_reader
from flud.protocol.errors import ErrorCode
from flud.storage.disk import ShareStore
from flud.storage.errors import NotFound
from flud.storage.leases import LeaseTerms
from tests.unit.node.test_request_handler import Node, error_code, ok
from tests.unit.storage.helpers import ALICE, BOB, key_of

DAY = 86400.0
TERMS = LeaseTerms(lease=90 * DAY, trash=7 * DAY)
T0 = 1_700_000_000.0


def run_inline(fn, *args):
    return defer.maybeDeferred(fn, *args)


@pytest.fixture
def store(tmp_path):
    s = ShareStore(tmp_path / "store", 64 * 1024 * 1024, fsync=False)
    yield s
    s.close()


class Monotonic:
    """A monotonic clock that follows the task.Clock except while `stall`ed
    (time.monotonic during a suspend, or the wall clock jumping ahead)."""

    def __init__(self, clock):
        self.clock = clock
        self.behind = 0.0

    def __call__(self):
        return self.clock.seconds() - self.behind

    def stall(self, seconds):
        """The next `seconds` of the wall clock pass without this one."""
        self.behind += seconds


def keeper_on(store, clock, interval=3600.0, read_offset=None, monotonic=None, **kwargs):
    return LeaseKeeper(store.leases, clock, run_inline, TERMS, interval, read_offset=read_offset,
                       monotonic=monotonic or Monotonic(clock), **kwargs)


def clock_at(t):
    clock = task.Clock()
    clock.advance(t)
    return clock


def test_a_renewal_is_written_at_most_once_per_interval(store, monkeypatch):
    data = random.Random(0).randbytes(100)
    store.put(key_of(data), ALICE, data)
    clock = clock_at(T0)
    keeper = keeper_on(store, clock)
    writes = []
    renew = store.leases.renew
    monkeypatch.setattr(store.leases, "renew", lambda o, now: writes.append(now) or renew(o, now))
    for _ in range(100):
        keeper.seen(ALICE)
    clock.advance(RENEW_EVERY - 1)
    keeper.seen(ALICE)
    assert writes == [T0]
    clock.advance(1)
    keeper.seen(ALICE)
    keeper.seen(BOB)
    assert writes == [T0, T0 + RENEW_EVERY, T0 + RENEW_EVERY]
    assert store.leases.lease(ALICE) == (T0 + RENEW_EVERY, None)


def test_the_memory_of_renewals_is_bounded(store, monkeypatch):
    monkeypatch.setattr(node_leases, "RENEWALS_REMEMBERED", 4)
    keeper = keeper_on(store, clock_at(T0))
    for i in range(10):
        keeper.seen(bytes([i]) * 32)
    assert len(keeper._renewed) <= 4


def test_sweeps_run_on_the_clock_and_trash_then_purge(store):
    data = random.Random(1).randbytes(5000)
    store.put(key_of(data), ALICE, data)
    clock = clock_at(T0)
    purged = []
    keeper = keeper_on(store, clock, DAY, on_purged=purged.append)
    keeper.start()
    clock.advance(0)
    assert keeper.counters["sweeps"] == 1 and store.leases.lease(ALICE) == (T0, None)
    for _ in range(90):
        clock.advance(DAY)
    assert keeper.counters["trashed"] == 0  # exactly 90 days: not yet
    clock.advance(DAY)
    assert keeper.counters["trashed"] == 1 and store.leases.is_trashed(ALICE)
    for _ in range(7):
        clock.advance(DAY)
    assert keeper.counters["purged"] == 0  # exactly 7 days in the trash: not yet
    clock.advance(DAY)
    assert keeper.counters["purged"] == 1 and keeper.counters["freed_bytes"] == 5000
    assert purged == [ALICE]
    assert store.stats()["bytes_stored"] == 0
    keeper.stop()
    sweeps = keeper.counters["sweeps"]
    clock.advance(10 * DAY)
    assert keeper.counters["sweeps"] == sweeps and not clock.getDelayedCalls()


def test_a_trashed_owner_seen_again_is_renewed_at_once(store):
    data = random.Random(2).randbytes(3000)
    store.put(key_of(data), ALICE, data)
    clock = clock_at(T0)
    keeper = keeper_on(store, clock, interval=DAY)
    keeper.seen(ALICE)
    keeper.start()
    for _ in range(92):
        clock.advance(DAY)
    assert store.leases.is_trashed(ALICE)
    keeper.seen(ALICE)  # within RENEW_EVERY of nothing it remembers: trashed wins
    assert not store.leases.is_trashed(ALICE) and keeper.counters["restored"] == 1
    keeper.stop()


def test_the_offset_file_moves_the_lease_clock_at_each_sweep(store, tmp_path):
    path = tmp_path / "offset"
    path.write_text("0")
    clock = clock_at(T0)
    keeper = keeper_on(store, clock, interval=10, read_offset=offset_file_reader(str(path)))
    keeper.start()
    clock.advance(0)
    assert keeper.now() == T0
    path.write_text(str(30 * DAY))
    assert keeper.now() == T0  # read at the next sweep
    clock.advance(10)
    assert keeper.now() == T0 + 10 + 30 * DAY
    path.write_text("not a number")
    clock.advance(10)
    assert keeper.now() == T0 + 20 + 30 * DAY  # kept
    assert keeper.stats()["clock"] == keeper.now()
    assert keeper.counters["clock_jumps"] == 0  # the offset moves the clock on purpose
    keeper.stop()


def test_the_first_sweep_credits_the_time_the_node_was_down(store):
    data = random.Random(3).randbytes(3000)
    store.put(key_of(data), ALICE, data)
    store.leases.sweep(T0, TERMS)  # the node's last sweep before it stopped
    clock = clock_at(T0 + 200 * DAY)
    keeper = keeper_on(store, clock)
    keeper.start()
    clock.advance(0)
    assert not store.leases.is_trashed(ALICE)
    keeper.stop()


def test_an_owners_request_over_the_wire_renews_and_restores(tmp_path, store):
    node = Node(tmp_path, store)
    lease_clock = clock_at(T0)  # its own: the connections' idle timers stay out of it
    keeper = keeper_on(store, lease_clock)
    node.handler.on_request = keeper.seen
    alice = node.connect()
    data = random.Random(4).randbytes(4000)
    ok(alice, alice.peer.store(key_of(data), data))
    owner = alice.identity.node_id
    assert store.leases.lease(owner) == (None, None)  # dated by the next sweep
    store.leases.sweep(T0, TERMS)
    assert store.leases.lease(owner) == (T0, None)
    store.leases.sweep(T0 + 91 * DAY, TERMS)
    assert store.leases.is_trashed(owner)
    bob = node.connect()
    ok(bob, bob.peer.ping())  # somebody else's request changes nothing for alice
    assert store.leases.is_trashed(owner)
    with pytest.raises(NotFound):
        store.size(key_of(data), owner)
    lease_clock.advance(91 * DAY)
    assert ok(alice, alice.peer.retrieve(key_of(data))) == data  # served: it brought alice back
    assert not store.leases.is_trashed(owner)
    assert error_code(bob, bob.peer.retrieve(key_of(data))) == ErrorCode.NOT_FOUND


# ---- clock jumps and suspends ----------------------------------------------------

def days(clock, n):
    for _ in range(n):
        clock.advance(DAY)


def alice_and_bob_on(store, keeper, clock):
    """Alice stores and is swept; Bob stores, then goes away until he is in the trash."""
    rng = random.Random(5)
    for owner in (ALICE, BOB):
        data = rng.randbytes(2000)
        store.put(key_of(data), owner, data)
    keeper.start()
    clock.advance(0)
    for _ in range(int(TERMS.lease / DAY) + 2):  # alice comes every day, bob never
        keeper.seen(ALICE)
        clock.advance(DAY)
    assert store.leases.is_trashed(BOB) and not store.leases.is_trashed(ALICE)


def test_a_wall_clock_jump_between_sweeps_trashes_nobody_and_is_credited(store):
    clock = clock_at(T0)
    mono = Monotonic(clock)
    keeper = keeper_on(store, clock, DAY, monotonic=mono)
    alice_and_bob_on(store, keeper, clock)
    last_seen = store.leases.lease(ALICE)[0]
    mono.stall(200 * DAY - DAY)  # the sweep was due in a day; the wall clock says 200
    clock.advance(200 * DAY)
    assert keeper.counters["clock_jumps"] == 1
    assert not store.leases.is_trashed(ALICE)
    assert store.leases.is_trashed(BOB) and keeper.counters["purged"] == 0  # nor purged
    # every lease moved with the clock: alice has her lease less the day that passed
    assert store.leases.lease(ALICE)[0] == pytest.approx(last_seen + 199 * DAY, abs=JUMP_BOUND * 2)
    days(clock, 88)
    assert not store.leases.is_trashed(ALICE)
    days(clock, 2)
    assert store.leases.is_trashed(ALICE)  # the lease still runs out: credited, not paused
    keeper.stop()


@pytest.mark.parametrize("how", ["monotonic-stalls", "boottime-jumps"])
def test_a_suspend_is_credited_to_every_lease(store, how):
    """time.monotonic stands still while the machine sleeps; CLOCK_BOOTTIME
    counts the sleep, which then is a gap far longer than a sweep interval."""
    clock = clock_at(T0)
    mono = Monotonic(clock)
    keeper = keeper_on(store, clock, DAY, monotonic=mono)
    alice_and_bob_on(store, keeper, clock)
    purged = keeper.counters["purged"]
    if how == "monotonic-stalls":
        mono.stall(120 * DAY)
    clock.advance(120 * DAY)  # the laptop that runs this node slept four months
    assert not store.leases.is_trashed(ALICE) and keeper.counters["purged"] == purged
    assert keeper.counters["credited_seconds"] >= 118 * DAY  # all but the day due
    days(clock, 80)
    assert not store.leases.is_trashed(ALICE)
    keeper.stop()


def test_the_first_sweep_on_a_jumped_clock_credits_as_downtime(store):
    """Across a restart there is no monotonic reference: the time since the
    last sweep is credited whatever its cause."""
    data = random.Random(6).randbytes(2000)
    store.put(key_of(data), ALICE, data)
    store.leases.sweep(T0, TERMS)
    clock = clock_at(T0 + 500 * DAY)
    keeper = keeper_on(store, clock, DAY)
    keeper.start()
    clock.advance(0)
    assert not store.leases.is_trashed(ALICE) and keeper.counters["clock_jumps"] == 0
    keeper.stop()


@pytest.mark.parametrize("wall, mono, charged, jumped", [
    (3600, 3600, 3600, False),                 # the usual sweep: nothing credited
    (3630, 3629.99, 3630, False),              # a little late, clocks agree
    (200 * DAY, 3600, 3600, True),             # the wall clock jumped ahead
    (30 * DAY, 0.5, 0.5, True),                # suspended (monotonic stood still)
    (30 * DAY, 30 * DAY, 3660, False),         # suspended (boot-time clock) or stopped
    (-5 * DAY, 3600, 0, True),                 # the wall clock went back: nothing charged
])
def test_measure_gap(wall, mono, charged, jumped):
    gap = measure_gap(wall, mono, 3600)
    assert gap.charged == pytest.approx(charged) and gap.jumped == jumped


def test_the_trash_outlasts_two_client_renewals():
    from flud.client.lease_renewal import RENEW_EVERY as CLIENT_RENEW_EVERY
    assert CLIENT_RENEWAL_PERIOD == CLIENT_RENEW_EVERY
    config = NodeConfig(home="h")
    assert config.trash_seconds >= MIN_TRASH >= 2 * CLIENT_RENEW_EVERY
    assert config.lease_seconds >= MIN_LEASE >= 2 * CLIENT_RENEW_EVERY


def test_a_renewal_after_the_clock_went_back_is_written_at_once(store, monkeypatch):
    clock = clock_at(T0)
    keeper = keeper_on(store, clock)
    writes = []
    renew = store.leases.renew
    monkeypatch.setattr(store.leases, "renew", lambda o, now: writes.append(now) or renew(o, now))
    keeper.seen(ALICE)
    keeper.offset = -30 * DAY  # as if the wall clock had been set back a month
    keeper.seen(ALICE)
    assert writes == [T0, T0 - 30 * DAY]
