"""What makes a crowd of nodes start fast (issue 30, `flud testnet up
--nodes 200`): probes past a full routing table are paced, a forked node
tells its launcher on a pipe when it listens and when it joined, the
launcher reads those lines whole even when they come in pieces, and the
records that go round a network again and again are parsed once."""
import json
import os
import random
import types

import pytest
from twisted.internet import defer, task

from flud.keys import Identity
from flud.node.discovery import SETTLED_PROBE_BURST, SETTLED_PROBE_RATE, Discovery
from flud.node.ready_signal import CHECK_INTERVAL, ReadySignal
from flud.protocol import messages, node_record
from flud.protocol.node_record import Address, RecordRefused, decode_record, sign_record
from flud.testnet.crowd import Crowd

NOW = 1_800_000_000
KEYS = [Identity.generate() for _ in range(80)]


def record(identity, port=5000):
    return sign_record(identity, 1, NOW + 3600, [Address.tcp("127.0.0.1", port)])


class Answering:
    tls_client = False

    def __init__(self, node_id):
        self.peer_id = node_id

    def request(self, op, message):
        return defer.succeed(messages.Empty())

    def close(self):
        pass


def test_probes_past_a_full_table_are_paced():
    clock = task.Clock()
    clock.advance(NOW)
    probed = []

    def probe(node_id, host, port):
        probed.append(node_id)
        return defer.succeed(Answering(node_id))

    me = KEYS[0]
    own = record(me, 4000)
    d = Discovery(me.node_id, lambda: own, clock, random.Random(1), probe,
                  lambda *a: defer.fail(ConnectionRefusedError()))
    d.joined = True
    first = [record(k, 5000 + i) for i, k in enumerate(KEYS[1:40])]
    d.consider(first)
    assert len(d.table) >= 20            # unpaced until the table is full
    before = len(probed)
    later = [record(k, 6000 + i) for i, k in enumerate(KEYS[40:])]
    d.consider(later)
    waiting = len(d.queue)
    assert len(probed) - before <= SETTLED_PROBE_BURST
    assert waiting > 0
    clock.advance(2.0)
    assert len(probed) - before <= SETTLED_PROBE_BURST + 2 * SETTLED_PROBE_RATE + 1
    for _ in range(120):                 # all of them, in time
        clock.advance(0.5)
    assert not d.queue
    d.stop()


def test_a_forked_node_says_when_it_listens_and_when_it_joined():
    read_fd, write_fd = os.pipe()
    try:
        clock = task.Clock()
        discovery = types.SimpleNamespace(joined=False, table=[])
        signal = ReadySignal(write_fd, 7, want_contacts=3)
        signal.listening({"node_id": "ab", "port": 1234})
        signal.watch(discovery, clock)
        clock.advance(CHECK_INTERVAL * 3)
        discovery.joined, discovery.table = True, [1, 2]     # joined, too few contacts
        clock.advance(CHECK_INTERVAL * 3)
        discovery.table = [1, 2, 3]
        clock.advance(CHECK_INTERVAL)
        clock.advance(CHECK_INTERVAL * 5)                   # said once, then quiet
        lines = os.read(read_fd, 65536).decode().splitlines()
        assert [json.loads(line)["event"] for line in lines] == ["listening", "joined"]
        assert json.loads(lines[0]) == {"index": 7, "event": "listening",
                                        "info": {"node_id": "ab", "port": 1234}}
        assert json.loads(lines[1])["contacts"] == 3
        assert not clock.getDelayedCalls()
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_launcher_reads_whole_lines_whatever_pieces_they_come_in(tmp_path):
    net = types.SimpleNamespace(processes={}, directory=str(tmp_path))
    crowd = Crowd(net, deadline=0)
    try:
        text = (json.dumps({"index": 3, "event": "listening", "info": {"port": 9}}) + "\n" +
                json.dumps({"index": 3, "event": "joined"}) + "\nnot json\n" +
                json.dumps({"index": 4, "event": "listening", "info": {"port": 10}}))
        os.write(crowd.write_fd, text[:30].encode())
        crowd.hear(0.1)
        assert crowd.listening == {}
        os.write(crowd.write_fd, text[30:].encode())
        crowd.hear(0.1)
        assert crowd.listening == {3: {"port": 9}} and crowd.joined == {3}
        os.write(crowd.write_fd, b"\n")
        crowd.hear(0.1)
        assert set(crowd.listening) == {3, 4}
    finally:
        crowd.close()


def test_a_record_is_parsed_once_and_the_memory_of_it_is_bounded():
    raw = record(KEYS[1]).encode()
    assert decode_record(raw) is decode_record(bytearray(raw))
    assert decode_record(raw).node_id == KEYS[1].node_id
    assert decode_record(raw).encode() == raw
    bad = bytearray(raw)
    bad[0] = 9
    for _ in range(2):                     # a refusal is never remembered as a record
        with pytest.raises(RecordRefused):
            decode_record(bytes(bad))
    for i in range(node_record.MEMO_SIZE + 50):
        decode_record(record(KEYS[2], port=1 + i % 60000).encode())
    assert len(node_record._decoded) <= node_record.MEMO_SIZE
    assert len(node_record._encoded) <= node_record.MEMO_SIZE


def test_a_join_counts_as_the_first_refresh():
    """A crowd starting together must not add four refresh lookups a node
    at the first refresh tick: the join's lookup just filled the buckets."""
    from flud.node.discovery import REFRESH_INTERVAL, REFRESH_TICK
    from flud.protocol.codec import Op
    clock = task.Clock()
    clock.advance(NOW)
    others = [record(k, 5000 + i) for i, k in enumerate(KEYS[1:8])]

    class Bootstrap(Answering):
        def request(self, op, message):
            if op == Op.FIND_NODE:
                return defer.succeed(messages.FoundNodes(others))
            return defer.succeed(messages.Empty())

    me = KEYS[0]
    own = record(me, 4000)
    d = Discovery(me.node_id, lambda: own, clock, random.Random(1),
                  lambda node_id, host, port: defer.succeed(Answering(node_id)),
                  lambda node_id, host, port: defer.succeed(Bootstrap(node_id)))
    d.start([("127.0.0.1", 4999)])
    assert d.joined and len(d.table) == len(others)
    after_join = d.counters["lookups"]
    clock.advance(3 * REFRESH_TICK)
    assert d.counters["lookups"] == after_join
    clock.advance(REFRESH_INTERVAL)
    assert d.counters["lookups"] > after_join        # refreshed later, on the clock
    d.stop()
