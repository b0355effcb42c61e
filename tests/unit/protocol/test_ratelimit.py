"""Rate limits: the token bucket (pure), the throttle (its timer on a
task.Clock), and a connection held to the limit, with no sleep anywhere."""
from twisted.internet import task

from flud.protocol import messages
from flud.protocol.client import PeerClient
from flud.protocol.outbound import BytesSource
from flud.protocol.ratelimit import MIN_BURST, Throttle, TokenBucket
from tests.unit.protocol.helpers import Outcome, RecordingHandler, connect, key_of, make_party

KIB = 1024


def test_the_bucket_lets_a_burst_through_then_charges_debt_at_its_rate():
    bucket = TokenBucket(rate=100 * KIB, burst=100 * KIB, now=0.0)
    assert bucket.charge(60 * KIB, 0.0) == 0.0
    assert bucket.charge(40 * KIB, 0.0) == 0.0          # the burst, spent exactly
    assert bucket.charge(50 * KIB, 0.0) == 0.5          # 50 KiB of debt at 100 KiB/s
    assert bucket.wait(0.25) == 0.25
    assert bucket.wait(0.5) == 0.0
    # it never fills past the burst, however long it waited
    assert bucket.charge(100 * KIB, 1000.0) == 0.0
    assert bucket.charge(1, 1000.0) > 0


def test_the_bucket_refuses_a_rate_of_zero_and_has_a_floor_on_its_burst():
    try:
        TokenBucket(0)
    except ValueError as err:
        assert "positive" in str(err)
    else:
        raise AssertionError("a zero rate was taken")
    assert TokenBucket(10).burst == MIN_BURST


def test_the_throttle_holds_callers_back_until_the_debt_is_paid():
    clock = task.Clock()
    throttle = Throttle(clock, rate=10 * KIB, burst=10 * KIB)
    woken = []
    assert throttle.charge(10 * KIB, lambda: woken.append("a")) is False
    assert throttle.charge(5 * KIB, lambda: woken.append("b")) is True
    assert throttle.charge(5 * KIB, lambda: woken.append("c")) is True   # 10 KiB of debt now
    clock.advance(0.9)
    assert woken == []
    clock.advance(0.1)
    assert woken == ["b", "c"]
    assert not clock.getDelayedCalls()


def test_the_throttle_rearms_when_charged_again_before_it_fires():
    clock = task.Clock()
    throttle = Throttle(clock, rate=10 * KIB, burst=10 * KIB)
    woken = []
    throttle.charge(15 * KIB, lambda: woken.append(1))   # 0.5 s of debt
    clock.advance(0.4)
    throttle.charge(10 * KIB, lambda: woken.append(2))   # more debt: 0.1 + 1 s
    clock.advance(0.1)
    assert woken == []
    clock.advance(1.0)
    assert woken == [1, 2]


def _pair(tmp_path, clock):
    node = make_party(tmp_path, "node")
    client = make_party(tmp_path, "client", role=messages.ROLE_CLIENT)
    handlers = RecordingHandler(), RecordingHandler()
    return client, handlers, connect(node, handlers[0], client, handlers[1], clock=clock)


def test_an_upload_goes_at_the_limit(tmp_path):
    clock = task.Clock()
    client, (server_handler, _), pair = _pair(tmp_path, clock)
    rate = 256 * KIB
    client.upload_limit = Throttle(clock, rate)
    data = bytes(range(256)) * (KIB * KIB // 256)
    Outcome(PeerClient(pair.client).store(key_of(data), data))

    def received():
        return sum(len(d) for (_, _, d, _) in server_handler.data)

    slack = 2 * 16 * KIB + 4 * KIB  # a TLS piece over the burst, frames, records
    steps = 0
    while received() < len(data):
        pair.flush()
        allowed = rate * clock.seconds() + client.upload_limit.bucket.burst + slack
        assert received() <= allowed, (clock.seconds(), received())
        clock.advance(0.05)
        steps += 1
        assert steps < 200
    # 1 MiB at 256 KiB/s with a 256 KiB burst: about 3 s, never less
    assert 2.9 <= clock.seconds() <= 3.3
    assert b"".join(d for (_, _, d, _) in server_handler.data) == data


def test_a_download_pauses_reading_until_the_limit_allows(tmp_path):
    clock = task.Clock()
    client, (server_handler, _), pair = _pair(tmp_path, clock)
    client.download_limit = Throttle(clock, rate=64 * KIB, burst=64 * KIB)
    calls = []
    pair.client.transport.pauseProducing = lambda: calls.append("pause")
    pair.client.transport.resumeProducing = lambda: calls.append("resume")
    data = bytes(200 * KIB)
    Outcome(PeerClient(pair.client).retrieve(key_of(data)))
    pair.flush()
    _, rid, _, _, _ = server_handler.requests[-1]
    pair.server.respond_stream(rid, messages.RetrieveResponse(len(data)), BytesSource(data))
    pair.flush()
    assert calls == ["pause"]
    assert pair.client.owes_us() is False   # held back by us: the peer is not stalling
    clock.advance(10)
    assert calls == ["pause", "resume"]     # the limit's turn ended: reading again
