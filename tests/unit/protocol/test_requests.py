"""requests.RequestTable and Answer: plain calls, no transport, no reactor."""
import subprocess
import sys
from pathlib import Path

import pytest

from flud.protocol import messages
from flud.protocol.codec import Op, Pieces, Placed
from flud.protocol.requests import POPULATE_MIN, Answer, RequestTable

REPO = Path(__file__).resolve().parents[3]


class Waiter:
    """What a caller waits on; the table only hands it back."""


def test_a_plain_answer_ends_its_request_and_hands_back_the_waiter():
    table = RequestTable()
    waiter = Waiter()
    table.open(1, Op.PING, waiter)
    assert len(table) == 1 and table.owed()
    done = table.on_head(1, Op.PING, messages.Empty(), end=True)
    assert done.waiter is waiter and done.finish() == messages.Empty()
    assert len(table) == 0 and not table.owed()
    assert table.on_head(1, Op.PING, messages.Empty(), end=True) is None  # already ended


def test_a_request_still_streaming_is_not_owed_until_marked_sent():
    table = RequestTable()
    table.open(2, Op.STORE, Waiter(), sent=False)
    assert not table.owed()
    table.mark_sent(2)
    assert table.owed()
    table.mark_sent(99)  # an unknown id is no error


def test_a_streamed_answer_without_a_known_size_is_joined_at_the_end():
    table = RequestTable()
    table.open(3, Op.RETRIEVE, Waiter())
    head = messages.RetrieveResponse(0, b"ab")  # no total announced: nothing preallocated
    assert table.on_head(3, Op.RETRIEVE, head, end=False) is None
    assert head.data == b""  # the head's bytes went to the answer
    assert table.on_data(3, b"cd", end=False) is None
    assert table.on_data(3, Pieces([b"e", b"f"], 2), end=False) is None
    done = table.on_data(3, b"g", end=True)
    assert done.finish().data == b"abcdefg"


def test_a_sink_gets_one_call_per_data_frame():
    chunks = []
    table = RequestTable()
    table.open(5, Op.RETRIEVE, Waiter(), sink=chunks.append)
    table.on_head(5, Op.RETRIEVE, messages.RetrieveResponse(6), end=False)
    table.on_data(5, Pieces([b"ab", b"c"], 3), end=False)
    done = table.on_data(5, memoryview(b"def"), end=True)
    assert [bytes(c) for c in chunks] == [b"abc", b"def"]
    assert type(chunks[0]) is bytes  # Pieces are joined for the sink
    assert done.finish().data == b""  # nothing kept: the sink had it all


def test_bytes_placed_by_the_connection_are_not_added_again():
    table = RequestTable()
    table.open(7, Op.RETRIEVE, Waiter())
    table.on_head(7, Op.RETRIEVE, messages.RetrieveResponse(4), end=False)
    answer = table.get(7)
    answer.buffer[:4] = b"wxyz"  # what _place decrypts straight in
    answer.filled = 4
    done = table.on_data(7, Placed(4), end=True)
    assert bytes(done.finish().data) == b"wxyz"


def test_an_error_or_a_cancel_takes_the_request_out():
    table = RequestTable()
    first, second = Waiter(), Waiter()
    table.open(1, Op.PING, first)
    table.open(3, Op.PING, second)
    assert table.pop(1).waiter is first and table.pop(1) is None
    rid, answer = table.cancel(second)
    assert (rid, answer.waiter) == (3, second)
    assert table.cancel(second) is None and len(table) == 0


def test_a_lost_connection_fails_every_open_request_once():
    table = RequestTable()
    waiters = [Waiter() for _ in range(3)]
    for rid, waiter in enumerate(waiters):
        table.open(rid, Op.PING, waiter)
    assert [a.waiter for a in table.fail_all()] == waiters
    assert table.fail_all() == [] and not table.owed()


@pytest.mark.parametrize("total", [100_000, 5 * 1024 * 1024])
def test_a_streamed_answer_lands_in_one_buffer_even_if_the_peer_sends_more(total):
    """The answer buffer is made from the head's total (a bytearray, or for a
    large answer a prefaulted mapping); bytes past the total still arrive."""
    pending = Answer(None, Op.RETRIEVE, None)
    pending.head = messages.RetrieveResponse(total)
    pending.expect(total)
    assert (type(pending.buffer) is memoryview) == (total >= POPULATE_MIN)
    data = bytes(range(256)) * (total // 256 + 1)
    extra = b"more than announced"
    for start in range(0, total, 300_001):
        pending.add(memoryview(data)[start:min(total, start + 300_001)])
    pending.add(extra)
    assert bytes(pending.finish().data) == data[:total] + extra


def test_a_streamed_answer_lands_in_the_buffer_the_caller_offers_when_it_fits():
    offered = memoryview(bytearray(b"x" * 1000))
    pending = Answer(None, Op.RETRIEVE, None, into=offered)
    pending.head = messages.RetrieveResponse(600)
    pending.expect(600)
    pending.add(b"a" * 400)
    pending.add(memoryview(b"b" * 200))
    data = pending.finish().data
    assert bytes(data) == b"a" * 400 + b"b" * 200
    assert data.obj is offered.obj and not data.readonly  # no copy, and writable
    assert bytes(offered[600:]) == b"x" * 400  # nothing past the answer touched

    too_small = memoryview(bytearray(100))
    pending = Answer(None, Op.RETRIEVE, None, into=too_small)
    pending.head = messages.RetrieveResponse(600)
    pending.expect(600)
    pending.add(b"c" * 600)
    assert bytes(pending.finish().data) == b"c" * 600
    assert bytes(too_small) == bytes(100)  # an answer that does not fit goes elsewhere


def test_the_request_table_imports_nothing_of_twisted_internet():
    code = ("import sys, flud.protocol.requests; "
            "print(sorted(m for m in sys.modules if m.startswith('twisted.internet')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.strip()
    assert out == "[]"
