"""Reachability's pure core (Judge, DialBackLimiter, addresses) and the
DIAL_BACK server's refusals, without sockets."""
import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock

from flud.node.dial_back import DialBackServer
from flud.node.reachability import (PRIVATE, PUBLIC, UNKNOWN, DialBackLimiter, Judge,
                                    candidate_addresses, is_loopback, plain_host)
from flud.protocol import messages
from flud.protocol.errors import ErrorCode, RemoteError

ME, OTHER = b"\x01" * 32, b"\x02" * 32


def test_plain_host_unmaps_v4_seen_on_a_dual_stack_socket():
    assert plain_host("::ffff:198.18.1.2") == "198.18.1.2"
    assert plain_host("fd00:f1d:0::1") == "fd00:f1d::1"
    assert plain_host("example.org") == "example.org"
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("::1") and not is_loopback("198.18.1.1")


def test_candidates_come_from_the_host_or_from_every_local_address():
    assert [a.text() for a in candidate_addresses("198.18.1.1", 7400)] == ["tcp:198.18.1.1:7400"]
    local = lambda: ["198.18.1.1", "fd00:f1d::1"]
    assert [a.text() for a in candidate_addresses("::", 7400, local)] == [
        "tcp:198.18.1.1:7400", "tcp6:[fd00:f1d::1]:7400"]
    assert [a.text() for a in candidate_addresses("0.0.0.0", 7400, local)] == ["tcp:198.18.1.1:7400"]
    assert [a.text() for a in candidate_addresses("::", 1, lambda: [])] == ["tcp:127.0.0.1:1"]


def test_two_peers_reaching_an_address_confirm_it():
    judge = Judge()
    judge.record("198.18.1.2", "198.18.1.1", 7400, True)
    assert judge.verdict() == UNKNOWN          # one peer is not enough
    judge.record("198.18.1.2", "198.18.1.1", 7400, True)
    assert judge.verdict() == UNKNOWN          # nor the same peer twice
    judge.record("198.18.1.3", "::ffff:198.18.1.1", 7400, True)
    assert judge.verdict() == PUBLIC and judge.confirmed() == [("198.18.1.1", 7400)]


def test_peers_that_cannot_reach_and_none_that_can_make_a_private_node():
    judge = Judge()
    judge.record("198.18.1.2", "198.18.200.1", 7400, False)
    assert judge.verdict() == UNKNOWN
    judge.record("198.18.1.3", "198.18.200.1", 7400, False)
    assert judge.verdict() == PRIVATE and judge.confirmed() == []
    assert judge.summary()["observed"] == ["198.18.200.1"]
    judge.record("198.18.1.4", "198.18.200.1", 7400, True)
    assert judge.verdict() == UNKNOWN          # mixed answers: no verdict yet


def test_the_limiter_bounds_per_asker_per_address_and_at_once():
    limiter = DialBackLimiter(interval=10, per_address=2, max_concurrent=3, max_tracked=100)
    assert limiter.allow("a", ME, 0)
    assert not limiter.allow("a", ME, 1)       # the same asker again, too soon
    assert limiter.allow("a", OTHER, 1)
    assert not limiter.allow("a", b"\x03" * 32, 2)   # third asker behind one address
    assert limiter.allow("b", ME, 2)
    assert not limiter.allow("c", ME, 2)       # three dials in flight
    limiter.done()
    assert limiter.allow("c", ME, 3)
    for _ in range(3):
        limiter.done()
    assert limiter.allow("a", ME, 11)          # the interval passed


def test_the_limiter_table_stays_bounded_under_a_flood():
    limiter = DialBackLimiter(interval=10, per_address=1, max_concurrent=10 ** 6, max_tracked=50)
    allowed = sum(limiter.allow(f"h{i}", ME, 0) for i in range(10_000))
    assert allowed == 50 and len(limiter._askers) <= 50


class FakeTransport:
    def __init__(self, host):
        self.peer = IPv4Address("TCP", host, 51000)

    def getPeer(self):
        return self.peer


class FakeConn:
    def __init__(self, host, peer_id=ME):
        self.transport = FakeTransport(host)
        self.peer_id = peer_id
        self.answers = []

    def respond(self, rid, message):
        self.answers.append((rid, message))


def test_a_dial_back_aimed_at_a_third_party_is_refused_with_its_code():
    reactor = MemoryReactorClock()
    server = DialBackServer(reactor, local=None, handler=None)
    with pytest.raises(RemoteError) as refused:
        server.serve(FakeConn("198.18.200.1"), 1, messages.DialBackRequest(7400, "203.0.113.9"))
    assert refused.value.code == ErrorCode.DIAL_THIRD_PARTY
    assert reactor.tcpClients == []            # nothing was dialled
    assert server.counters["third_party"] == 1


def test_the_server_dials_only_the_observed_address_and_rate_limits():
    reactor = MemoryReactorClock()
    server = DialBackServer(reactor, local=None, handler=None)
    server.serve(FakeConn("198.18.200.1"), 1, messages.DialBackRequest(7400))
    host, port = reactor.tcpClients[0][:2]
    assert (host, port) == ("198.18.200.1", 7400)
    with pytest.raises(RemoteError) as refused:
        server.serve(FakeConn("198.18.200.1"), 2, messages.DialBackRequest(7400, "198.18.200.1"))
    assert refused.value.code == ErrorCode.RATE_LIMITED
    assert len(reactor.tcpClients) == 1


class StubRecord:
    def __init__(self):
        self.candidates, self.moves = (), []

    def move(self, addresses):
        self.moves.append(list(addresses))


def scripted_prober(answers):
    """A Prober whose rounds ask two peers; answers(round) -> [(reached,
    answered Deferred or None)] per peer (None: answered at once)."""
    import random

    from twisted.internet import defer

    from flud.node.dial_back import Prober
    clock = MemoryReactorClock()
    prober = Prober(clock, None, None, None, StubRecord(), 7400, random.Random(1))
    prober._askers = lambda: [(b"a" * 32, "198.18.1.1", 7400), (b"b" * 32, "198.18.2.1", 7400)]
    rounds = []

    def ask(peer_id, host, port):
        reached, gate = answers(prober.rounds - 1)[0 if host.endswith("1.1") else 1]
        if host.endswith("1.1"):
            rounds.append(clock.seconds())
        d = gate or defer.succeed(None)
        return d.addCallback(lambda _: prober.judge.record(host, "198.18.200.1", 7400, reached))
    prober._ask = ask
    return clock, prober, rounds


def test_a_new_candidate_is_checked_once_the_peers_asked_take_a_new_request():
    """The gateway mapped a port after a round judged the node private: the
    next round comes as soon as the peers asked take a new DIAL_BACK from
    it (each serves an asker once per PER_ADDRESS_INTERVAL), not in 10 minutes."""
    from flud.node.dial_back import FIRST_ROUND_AFTER
    from flud.node.reachability import PER_ADDRESS_INTERVAL
    clock, prober, rounds = scripted_prober(lambda n: [(n > 0, None), (n > 0, None)])
    prober.start()
    clock.advance(FIRST_ROUND_AFTER)
    assert prober.verdict == PRIVATE and rounds == [FIRST_ROUND_AFTER]
    clock.advance(2.0)
    prober.probe_soon()                           # mapped
    clock.advance(PER_ADDRESS_INTERVAL - 2.0)
    assert len(rounds) == 1                       # the peers would refuse yet
    clock.advance(1.0)
    assert rounds == [FIRST_ROUND_AFTER, FIRST_ROUND_AFTER + PER_ADDRESS_INTERVAL + 1.0]
    assert prober.verdict == PUBLIC


def test_a_mapping_made_during_a_round_gets_a_round_of_its_own():
    from twisted.internet import defer

    from flud.node.dial_back import FIRST_ROUND_AFTER, REPROBE_INTERVAL
    gate = defer.Deferred()
    clock, prober, rounds = scripted_prober(
        lambda n: [(False, gate), (False, None)] if n == 0 else [(True, None), (True, None)])
    prober.start()
    clock.advance(FIRST_ROUND_AFTER)
    prober.probe_soon()                           # while the first round waits
    gate.callback(None)
    assert prober.verdict == PRIVATE
    clock.advance(REPROBE_INTERVAL / 2)
    assert len(rounds) == 2 and prober.verdict == PUBLIC


def test_a_recheck_no_peer_answered_is_tried_again_soon():
    from flud.node.dial_back import FIRST_ROUND_AFTER, REPROBE_INTERVAL, RETRY_AFTER
    clock, prober, rounds = scripted_prober(lambda n: [(False, None), (False, None)])
    prober.start()
    clock.advance(FIRST_ROUND_AFTER)
    assert prober.verdict == PRIVATE
    clock.advance(REPROBE_INTERVAL)
    assert len(rounds) == 2
    prober._askers = lambda: []                   # nobody to ask: no answer at all
    clock.advance(REPROBE_INTERVAL)
    clock.advance(RETRY_AFTER)
    assert len(rounds) == 2 and prober.rounds == 4 and prober.verdict == PRIVATE
