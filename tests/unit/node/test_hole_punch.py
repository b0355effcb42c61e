"""Hole punching, sans I/O (flud/node/hole_punch.py) and the responder's
glue (flud/node/puncher.py) on fakes: what a peer may make a node dial,
and what a flood of punch requests costs."""
import pytest
from twisted.internet.task import Clock

from flud.protocol import hole_punch as hp
from flud.node.puncher import Puncher
from flud.protocol import messages
from flud.protocol.errors import ErrorCode, RemoteError

PEER = b"p" * 32
ME = b"m" * 32


def test_nat_behaviour_from_what_peers_observed():
    assert hp.nat_behaviour([]) == hp.NAT_UNKNOWN
    assert hp.nat_behaviour([(40000, 40000)]) == hp.NAT_PRESERVING
    assert hp.nat_behaviour([(40000, 40000), (40001, 40001), (40002, 1234)]) == hp.NAT_PRESERVING
    assert hp.nat_behaviour([(40000, 5123)]) == hp.NAT_UNKNOWN          # one is not enough
    assert hp.nat_behaviour([(40000, 5123), (40001, 61000)]) == hp.NAT_CHANGING
    # only the latest observations count (a NAT replaced)
    old = [(p, p + 1) for p in range(40000, 40040)]
    assert hp.nat_behaviour(old + [(p, p) for p in range(50000, 50016)]) == hp.NAT_PRESERVING


def test_only_two_port_changing_nats_are_not_tried():
    assert "symmetric" in hp.may_punch(hp.NAT_CHANGING, hp.NAT_CHANGING)
    assert hp.may_punch(hp.NAT_CHANGING, hp.NAT_PRESERVING) is None
    assert hp.may_punch(hp.NAT_UNKNOWN, hp.NAT_CHANGING) is None


def test_announced_addresses_are_dialled_only_where_the_peer_can_be():
    ok = hp.check_announced([("198.18.200.1", 7400), ("::ffff:198.18.200.1", 7400)], 7400)
    assert ok == [("198.18.200.1", 7400)]          # one spelling, once

    def refused(addresses, why, **kw):
        with pytest.raises(RemoteError) as caught:
            hp.check_announced(addresses, 7400, **kw)
        assert caught.value.code == ErrorCode.PUNCH_ADDRESS
        assert why in caught.value.message

    refused([("127.0.0.1", 7400)], "not an address a peer can be seen at")
    refused([("::1", 7400)], "not an address a peer can be seen at")
    refused([("0.0.0.0", 7400)], "not an address")
    refused([("224.0.0.1", 7400)], "not an address")
    refused([("169.254.1.1", 7400)], "not an address")
    refused([("fe80::1", 7400)], "not an address")
    refused([("example.com", 7400)], "not an IP address")
    refused([("198.18.200.1", 22)], "not the peer's listening port")
    refused([("198.18.1.1", 7400)], "another node's address",
            third_party_hosts=["198.18.1.1"])
    refused([("198.18.200.1", 7400)], "this node's own address",
            own_hosts=["198.18.200.1"])
    refused([], "no address")
    # one bad address among good ones is left out, the good ones kept
    assert hp.check_announced([("127.0.0.1", 7400), ("198.18.201.1", 7400)], 7400,
                              third_party_hosts=["198.18.1.1"]) == [("198.18.201.1", 7400)]


def test_the_initiator_times_the_round_trip_and_bounds_its_attempts():
    punch = hp.Punch(PEER, max_attempts=2)
    punch.connect_sent(10.0)
    assert punch.answered(10.040, [("198.18.200.1", 7400)]) == pytest.approx(0.020)
    assert punch.rtt == pytest.approx(0.040)
    assert punch.failed("timed out") is True
    punch.connect_sent(20.0)
    assert punch.answered(29.0, []) == hp.MAX_SYNC_DELAY     # a relay that stalls: capped
    assert punch.failed("timed out") is False
    assert punch.outcome == "2 attempts failed: timed out"
    done = hp.Punch(PEER)
    done.succeeded()
    assert done.outcome == "punched"


def _code(call):
    with pytest.raises(RemoteError) as caught:
        call()
    return caught.value.code


def test_a_flood_of_punch_requests_is_bounded():
    gate = hp.PunchGate(max_tracked=8)
    for _ in range(hp.PER_PEER_CONNECTS):
        gate.connect(PEER, 0.0)
    assert _code(lambda: gate.connect(PEER, 1.0)) == ErrorCode.RATE_LIMITED
    gate.connect(PEER, hp.PER_PEER_WINDOW)                    # a new window
    # many peers at once: the table stays bounded, the overflow is refused
    for i in range(7):                                        # PEER is the 8th
        gate.connect(bytes([i]) * 32, hp.PER_PEER_WINDOW)
    assert _code(lambda: gate.connect(b"z" * 32, hp.PER_PEER_WINDOW + 1)) == ErrorCode.RATE_LIMITED
    assert len(gate._connects) <= 8
    gate.connect(b"z" * 32, 3 * hp.PER_PEER_WINDOW)           # old windows forgotten
    assert len(gate._connects) <= 8


def test_a_sync_needs_an_agreed_connect_and_is_taken_once():
    gate = hp.PunchGate()
    assert _code(lambda: gate.sync(PEER, 0.0)) == ErrorCode.PUNCH_REFUSED
    gate.agree(PEER, [("198.18.200.1", 7400)], 0.0)
    assert gate.sync(PEER, 1.0) == [("198.18.200.1", 7400)]
    assert gate.in_flight == 1
    assert _code(lambda: gate.sync(PEER, 1.5)) == ErrorCode.PUNCH_REFUSED   # once
    gate.end()
    gate.agree(PEER, [("198.18.200.1", 7400)], 10.0)
    assert _code(lambda: gate.sync(PEER, 10.0 + hp.SYNC_WINDOW + 1)) == ErrorCode.PUNCH_REFUSED


def test_punch_dials_at_once_are_capped():
    gate = hp.PunchGate()
    for i in range(hp.MAX_CONCURRENT):
        gate.agree(bytes([i]) * 32, [("198.18.200.1", 7400)], 0.0)
        gate.sync(bytes([i]) * 32, 0.0)
    gate.agree(PEER, [("198.18.200.1", 7400)], 0.0)
    assert _code(lambda: gate.sync(PEER, 0.0)) == ErrorCode.RATE_LIMITED
    assert gate.begin() is False
    gate.end()
    assert gate.sync(PEER, 0.0)


def test_the_book_remembers_outcomes_boundedly_and_waits_before_trying_again():
    book = hp.PunchBook(max_tracked=3)
    book.record(PEER, "3 attempts failed: timed out", 0.0, "initiator", 3, 0.002)
    assert not book.may_try(PEER, 1.0)
    assert book.may_try(PEER, hp.RETRY_AFTER)
    for i in range(5):
        book.record(bytes([i]) * 32, "punched", 1.0, "responder", 1)
    assert len(book.peers) == 3 and book.counters == {"started": 0, "punched": 5, "failed": 1,
                                                      "skipped": 0}
    summary = book.summary()
    assert all(v["outcome"] == "punched" for v in summary["peers"].values())


def test_punch_messages_refuse_what_they_cannot_carry():
    body = messages.PunchConnect([("198.18.200.1", 7400)] * 4, 2)
    assert messages.PunchConnect.decode(body.encode()) == body
    too_many = bytes([1, 5]) + (b"\x1c\xe8\x01a") * 5
    for bad in (too_many, bytes([1, 1]) + b"\x00\x00\x01a", bytes([1, 1]) + b"\x1c\xe8\x00",
                bytes([1])):
        assert _code(lambda: messages.PunchConnect.decode(bad)) == ErrorCode.MALFORMED
    assert _code(lambda: messages.PunchSync.decode(b"\x01\x02")) == ErrorCode.MALFORMED


# ---- the responder's glue, on fakes ------------------------------------------------

class FakeJudge:
    def __init__(self, observed):
        self.observed = {h: {"x"} for h in observed}

    def confirmed(self):
        return []


class FakeProber:
    verdict = "private"

    def __init__(self, observed=("198.18.201.1",)):
        self.judge = FakeJudge(observed)
        self.port_observations = [(40000, 40000), (40001, 40001)]
        self.own_record = type("R", (), {"candidates": ()})()


class FakeRecord:
    def __init__(self, host):
        self.host = host

    def tcp_addresses(self):
        return [type("A", (), {"host": self.host})()]


class FakeMembership:
    def __init__(self, others):
        self.peers = {bytes([i]) * 32: type("P", (), {"record": FakeRecord(h)})()
                      for i, h in enumerate(others)}


class FakeConn:
    def __init__(self, relayed=True, listen_port=7400, peer_id=PEER):
        self.relayed = relayed
        self.peer_id = peer_id
        self.peer_hello = messages.Hello(1, messages.ROLE_NODE, listen_port, b"k", b"s")
        self.answers = []

    def respond(self, rid, message):
        self.answers.append((rid, message))


def _puncher(**kw):
    local = type("L", (), {"listen_port": 7400,
                           "identity": type("I", (), {"node_id": ME})()})()
    return Puncher(Clock(), local, None, None, FakeMembership(["198.18.1.1"]),
                   FakeProber(**kw), "::")


def test_the_responder_answers_a_connect_with_its_own_addresses():
    puncher = _puncher()
    conn = FakeConn()
    puncher.serve_connect(conn, 7, messages.PunchConnect([("198.18.200.1", 7400)], 1))
    (rid, answer), = conn.answers
    assert rid == 7 and answer == messages.PunchConnect([("198.18.201.1", 7400)],
                                                        hp.NAT_PRESERVING)
    assert puncher.gate._agreed[PEER][0] == [("198.18.200.1", 7400)]


def test_the_responder_refuses_what_it_must_not_dial():
    puncher = _puncher()
    connect = messages.PunchConnect([("198.18.200.1", 7400)], 1)
    assert _code(lambda: puncher.serve_connect(FakeConn(relayed=False), 1, connect)) \
        == ErrorCode.PUNCH_REFUSED                     # direct already
    aimed = messages.PunchConnect([("198.18.1.1", 7400)], 1)   # a known public node
    assert _code(lambda: puncher.serve_connect(FakeConn(), 1, aimed)) == ErrorCode.PUNCH_ADDRESS
    assert _code(lambda: puncher.serve_connect(FakeConn(listen_port=7401), 1, connect)) \
        == ErrorCode.PUNCH_ADDRESS                     # not where the peer listens
    assert puncher.gate.counters["bad_address"] == 2
    assert _code(lambda: puncher.serve_sync(FakeConn(), 2, messages.PunchSync(1))) \
        == ErrorCode.PUNCH_REFUSED                     # no CONNECT agreed
    assert PEER not in puncher.gate._agreed
    unaware = _puncher(observed=())
    assert _code(lambda: unaware.serve_connect(FakeConn(), 1, connect)) == ErrorCode.PUNCH_REFUSED


def test_when_both_ends_start_a_punch_only_the_lower_ids_goes_on():
    puncher = _puncher()
    puncher.active[PEER] = None          # this node started one to PEER ("m" < "p")
    connect = messages.PunchConnect([("198.18.200.1", 7400)], 1)
    assert _code(lambda: puncher.serve_connect(FakeConn(), 1, connect)) == ErrorCode.PUNCH_REFUSED
    lower = FakeConn(peer_id=b"a" * 32)
    puncher.active[lower.peer_id] = None
    puncher.serve_connect(lower, 1, connect)          # the peer's id is lower: it goes on
    assert lower.answers


def test_a_client_punches_from_an_ephemeral_port_not_a_low_one():
    assert hp.check_announced([("198.18.200.1", 40000)], 0) == [("198.18.200.1", 40000)]
    with pytest.raises(RemoteError) as caught:
        hp.check_announced([("198.18.200.1", 80)], 0)
    assert caught.value.code == ErrorCode.PUNCH_ADDRESS


# ---- the initiator's glue, on fakes ------------------------------------------------

from twisted.internet import defer  # noqa: E402

from flud.protocol.codec import Op  # noqa: E402
from flud.protocol.punch_initiator import PunchInitiator  # noqa: E402


class FakeRelayed:
    relayed = True
    tls_client = True

    last_progress = 0.0

    def __init__(self, answer):
        self.peer_id = PEER
        self.peer_hello = messages.Hello(1, messages.ROLE_NODE, 7400, b"k", b"s")
        self.answer = answer
        self.closed = False
        self.sent = []
        self.session = type("S", (), {"open_inbound": 0, "open_outbound": 0})()

    def request(self, op, message):
        self.sent.append(Op(op).name)
        if op == Op.PUNCH_CONNECT:
            return defer.succeed(self.answer)
        return defer.succeed(messages.Empty())

    def describe(self):
        return "peer"

    def close(self):
        self.closed = True


class FakePool:
    def __init__(self):
        self.replaced = []

    def replace(self, conn):
        self.replaced.append(conn)

    def connection(self, peer_id):
        return None


class ScriptedInitiator(PunchInitiator):
    def __init__(self, clock, dials, nat=hp.NAT_PRESERVING, third=()):
        local = type("L", (), {"listen_port": 7400})()
        super().__init__(clock, local, None, FakePool())
        self.dials = list(dials)
        self.dialled = []
        self._nat = nat
        self._third = set(third)

    def wants(self, conn):
        return True

    def own_addresses(self, relayed):
        return [("198.18.200.1", 7400)]

    def nat(self):
        return self._nat

    def third_parties(self, peer_id):
        return self._third

    def dial(self, targets, peer_id, tls_client, port):
        self.dialled.append((targets, tls_client, port))
        self.gate.end()
        outcome = self.dials.pop(0)
        return defer.succeed((outcome, None) if outcome else (None, "timed out"))


def _run(initiator, relayed, clock):
    done = []
    initiator.initiate(relayed).addBoth(done.append)
    for _ in range(40):
        clock.advance(1.0)
    return done[0]


def test_the_initiator_retries_then_moves_the_pair_to_the_punched_connection():
    clock = Clock()
    direct = type("C", (), {"closed": False, "describe": lambda self: "direct"})()
    initiator = ScriptedInitiator(clock, [None, None, direct])
    relayed = FakeRelayed(messages.PunchConnect([("198.18.201.1", 7400)], hp.NAT_PRESERVING))
    assert _run(initiator, relayed, clock) is direct
    assert relayed.sent == ["PUNCH_CONNECT", "PUNCH_SYNC"] * 3
    assert initiator.dialled == [([("198.18.201.1", 7400)], True, 7400)] * 3
    assert initiator.pool.replaced == [direct] and relayed.closed     # the relay is released
    assert initiator.book.peers[PEER][0] == "punched" and not initiator.active


def test_the_initiator_gives_up_after_its_attempts_and_stays_relayed():
    clock = Clock()
    initiator = ScriptedInitiator(clock, [None] * 5)
    relayed = FakeRelayed(messages.PunchConnect([("198.18.201.1", 7400)], hp.NAT_PRESERVING))
    assert _run(initiator, relayed, clock) is None
    assert len(initiator.dialled) == hp.MAX_ATTEMPTS and not relayed.closed
    assert initiator.book.peers[PEER][0] == "3 attempts failed: timed out"
    assert not initiator.book.may_try(PEER, clock.seconds())


def test_the_initiator_dials_nothing_it_must_not():
    clock = Clock()
    both_symmetric = ScriptedInitiator(clock, [], nat=hp.NAT_CHANGING)
    relayed = FakeRelayed(messages.PunchConnect([("198.18.201.1", 7400)], hp.NAT_CHANGING))
    assert _run(both_symmetric, relayed, clock) is None
    assert relayed.sent == ["PUNCH_CONNECT"] and not both_symmetric.dialled
    assert "symmetric" in both_symmetric.book.peers[PEER][0]
    aimed = ScriptedInitiator(clock, [], third=["198.18.1.1"])
    relayed = FakeRelayed(messages.PunchConnect([("198.18.1.1", 7400)], hp.NAT_PRESERVING))
    assert _run(aimed, relayed, clock) is None
    assert relayed.sent == ["PUNCH_CONNECT"] and not aimed.dialled
    assert "another node's address" in aimed.book.peers[PEER][0]


def test_the_relayed_connection_is_released_only_once_it_idles():
    """A caller that took the relayed connection before the upgrade may
    still send on it: it is closed after RELEASE_IDLE without traffic, and
    only by the side that dialled it."""
    from flud.protocol.punch_initiator import RELEASE_IDLE
    clock = Clock()
    initiator = ScriptedInitiator(clock, [])
    direct = type("C", (), {"closed": False})()
    relayed = FakeRelayed(None)
    initiator.upgrade(relayed, direct)
    for _ in range(int(RELEASE_IDLE) * 2):
        relayed.last_progress = clock.seconds()          # still carrying something
        clock.advance(1.0)
    assert not relayed.closed and initiator.pool.replaced == [direct]
    clock.advance(RELEASE_IDLE + 3)
    assert relayed.closed and initiator.released == 1
    accepted_side = FakeRelayed(None)
    accepted_side.tls_client = False
    initiator.upgrade(accepted_side, direct)
    clock.advance(RELEASE_IDLE * 3)
    assert not accepted_side.closed
