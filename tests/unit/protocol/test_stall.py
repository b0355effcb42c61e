"""StallWatch: a peer that stops without closing is noticed within its
deadline, and only a peer that owes us progress can stall."""
from twisted.internet import task

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.stall import STALL_FLOOR, TICK, PeerStalled, StallWatch
from tests.unit.protocol.helpers import Outcome, RecordingHandler, connect, make_party


class _Conn:
    def __init__(self, clock):
        self.clock = clock
        self.closed = False
        self.owed = False
        self.last_progress = clock.seconds()

    def owes_us(self):
        return self.owed

    def progress(self):
        self.last_progress = self.clock.seconds()


def _watch(clock, conns):
    stalls = []
    watch = StallWatch(clock, lambda: conns, lambda c, s: stalls.append((c, s)))
    watch.start()
    return watch, stalls


def test_a_silent_connection_that_owes_us_stalls_at_the_floor():
    clock = task.Clock()
    conn = _Conn(clock)
    conn.owed = True
    watch, stalls = _watch(clock, [conn])
    clock.pump([TICK] * int(STALL_FLOOR / TICK))
    assert stalls == []
    clock.pump([TICK] * 2)
    assert [c for c, _ in stalls] == [conn] and stalls[0][1] > STALL_FLOOR
    watch.stop()


def test_a_connection_that_owes_nothing_never_stalls():
    clock = task.Clock()
    idle = _Conn(clock)
    watch, stalls = _watch(clock, [idle])
    clock.pump([TICK] * 1000)
    assert stalls == []
    watch.stop()


def test_a_connection_that_keeps_making_progress_never_stalls():
    clock = task.Clock()
    busy = _Conn(clock)
    busy.owed = True
    watch, stalls = _watch(clock, [busy])
    for _ in range(1000):
        clock.advance(TICK)
        busy.progress()
    assert stalls == []
    watch.stop()


def test_long_healthy_silences_widen_the_deadline():
    """A network whose healthy nodes go quiet for 2 s at times (busy disks)
    gets a deadline of several times that, not the floor."""
    clock = task.Clock()
    slow = _Conn(clock)
    slow.owed = True
    watch, stalls = _watch(clock, [slow])
    for _ in range(5):
        clock.pump([TICK] * 8)  # 2 s of silence, then progress
        slow.progress()
        clock.advance(TICK)
    assert stalls == []
    assert watch.deadline() >= 4 * 1.75
    watch.stop()


def test_a_peer_that_never_answers_is_aborted_and_its_requests_fail(tmp_path):
    """Over a real connection.Connection: an answer owed, nothing arrives; the
    watch aborts the connection and the request fails with PeerStalled."""
    node = make_party(tmp_path, "node")
    client_party = make_party(tmp_path, "client", role=messages.ROLE_CLIENT)
    server_handler = RecordingHandler(answer_ping=False)
    pair = connect(node, server_handler, client_party, RecordingHandler())
    conn = pair.client
    assert not conn.owes_us()  # nothing asked yet
    outcome = Outcome(conn.request(Op.PING, messages.Empty()))
    pair.flush()
    assert conn.owes_us()
    stalls = []

    def on_stall(c, silence):
        stalls.append(c)
        c.abort(PeerStalled("no progress"))

    watch = StallWatch(conn.clock, lambda: [conn], on_stall)
    watch.start()
    conn.clock.pump([TICK] * int(STALL_FLOOR / TICK + 2))
    pair.flush()
    assert stalls == [conn] and conn.closed
    assert "no progress" in str(outcome.failure(PeerStalled))
    watch.stop()


def test_time_our_own_reactor_was_busy_is_not_counted_as_a_peers_silence():
    """Ticks that come late (the reactor was writing files for seconds) count
    one tick each: a peer whose answer waited in our socket is not stalled."""
    clock = task.Clock()
    conn = _Conn(clock)
    conn.owed = True
    watch, stalls = _watch(clock, [conn])
    for _ in range(3):
        clock.advance(2.0)  # three late ticks: 6 s of wall time, 3 ticks counted
    assert stalls == []
    clock.pump([TICK] * int(STALL_FLOOR / TICK + 2))  # on-time silence does count
    assert [c for c, _ in stalls] == [conn]
    watch.stop()
