"""The sans-I/O Session, driven with plain bytes between two instances."""

from __future__ import annotations

import struct

import pytest

from flud.protocol import messages
from flud.protocol.codec import FLAG_END, FrameParser, FrameType, Op
from flud.protocol.errors import ErrorCode, FrameError, RemoteError
from flud.protocol.session import (ErrorReceived, HelloReceived, RequestCancelled,
                                   RequestData, RequestReceived, ResponseData,
                                   ResponseReceived, Session, State)
from tests.unit.protocol.helpers import encode_frame, key_of

KEY = key_of(b"abcdefghij")


def hello(version=messages.PROTOCOL_VERSION, role=messages.ROLE_NODE):
    return messages.Hello(version, role, 4000, b"public-key", b"signature", "host")


def wire(session: Session) -> bytes:
    return b"".join(bytes(chunk) for chunk in session.take_outbound())


def deliver(src: Session, dst: Session) -> list:
    return dst.receive(wire(src))


def frames(session: Session) -> list:
    return FrameParser().feed(wire(session))


@pytest.fixture
def pair():
    """(TLS client session, TLS server session), HELLOs exchanged."""
    client, server = Session(tls_client=True), Session(tls_client=False)
    client.send_hello(hello(role=messages.ROLE_CLIENT))
    server.send_hello(hello())
    [event] = deliver(client, server)
    assert isinstance(event, HelloReceived) and event.hello.role == messages.ROLE_CLIENT
    [event] = deliver(server, client)
    assert isinstance(event, HelloReceived) and event.hello.listen_host == "host"
    assert client.state is server.state is State.READY
    return client, server


def ping_works(a: Session, b: Session) -> None:
    rid = a.send_request(Op.PING, b"")
    [event] = deliver(a, b)
    assert event == RequestReceived(rid, Op.PING, messages.Empty(), True)
    assert b.send_response(rid, b"")
    [answer] = deliver(b, a)
    assert answer == ResponseReceived(rid, Op.PING, messages.Empty(), True)
    assert a.open_outbound == 0 and b.open_inbound == 0


# ---- HELLO ---------------------------------------------------------------------

@pytest.mark.parametrize("frame", [
    encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 1),
    encode_frame(FrameType.DATA, 0, FLAG_END, 1, b"x"),
    encode_frame(FrameType.CANCEL, 0, FLAG_END, 1),
    encode_frame(FrameType.ERROR, 0, FLAG_END, 1, b"\x00\x01"),
], ids=["request", "data", "cancel", "error"])
def test_hello_must_come_first(frame):
    server = Session(tls_client=False)
    with pytest.raises(FrameError) as excinfo:
        server.receive(frame)
    assert excinfo.value.code == ErrorCode.PROTOCOL
    assert server.state is State.AWAIT_HELLO


def test_version_mismatch():
    server = Session(tls_client=False)
    with pytest.raises(FrameError) as excinfo:
        server.receive(encode_frame(FrameType.HELLO, 0, FLAG_END, 0, hello(version=2).encode()))
    assert excinfo.value.code == ErrorCode.VERSION
    assert "2" in excinfo.value.message
    assert server.state is State.AWAIT_HELLO


def test_malformed_hello_is_a_frame_error():
    # Before HELLO there is nobody to answer: a bad HELLO body must close the
    # connection like any bad frame (FrameError), not escape as a RemoteError.
    server = Session(tls_client=False)
    body = hello().encode()
    for bad in (body[:5], body + b"x", body[:2] + b"\x09" + body[3:]):
        with pytest.raises(FrameError) as excinfo:
            Session(tls_client=False).receive(encode_frame(FrameType.HELLO, 0, FLAG_END, 0, bad))
        assert excinfo.value.code == ErrorCode.MALFORMED
    assert server.state is State.AWAIT_HELLO


def test_second_hello_is_a_protocol_error(pair):
    client, server = pair
    client.send_hello(hello())
    with pytest.raises(FrameError) as excinfo:
        deliver(client, server)
    assert excinfo.value.code == ErrorCode.PROTOCOL


def test_hello_and_first_request_in_one_chunk():
    client, server = Session(tls_client=True), Session(tls_client=False)
    client.send_hello(hello())
    rid = client.send_request(Op.PING, b"")
    events = deliver(client, server)
    assert [type(e) for e in events] == [HelloReceived, RequestReceived]
    assert events[1].request_id == rid


# ---- request ids ---------------------------------------------------------------

def test_request_id_parity(pair):
    client, server = pair
    assert [client.send_request(Op.PING, b"") for _ in range(3)] == [1, 3, 5]
    assert [server.send_request(Op.PING, b"") for _ in range(3)] == [2, 4, 6]
    assert [e.request_id for e in deliver(client, server)] == [1, 3, 5]
    assert [e.request_id for e in deliver(server, client)] == [2, 4, 6]


@pytest.mark.parametrize("receiver,rid", [("server", 2), ("client", 1)])
def test_a_request_id_of_the_wrong_parity_is_a_protocol_error(pair, receiver, rid):
    client, server = pair
    session = server if receiver == "server" else client
    with pytest.raises(FrameError) as excinfo:
        session.receive(encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, rid))
    assert excinfo.value.code == ErrorCode.PROTOCOL


def test_reusing_an_open_request_id_is_a_protocol_error(pair):
    client, server = pair
    frame = encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 1)
    server.receive(frame)
    with pytest.raises(FrameError) as excinfo:
        server.receive(frame)
    assert excinfo.value.code == ErrorCode.PROTOCOL


# ---- round trips ---------------------------------------------------------------

def test_request_response_both_ways(pair):
    client, server = pair
    ping_works(client, server)
    ping_works(server, client)


def test_typed_bodies_reach_the_other_side(pair):
    client, server = pair
    request = messages.VerifyRequest(KEY, b"nonce", 2, 5)
    rid = client.send_request(Op.VERIFY, request.encode())
    [event] = deliver(client, server)
    assert event == RequestReceived(rid, Op.VERIFY, request, True)
    server.send_response(rid, messages.Digest(b"\x05" * 32).encode())
    [answer] = deliver(server, client)
    assert answer.message == messages.Digest(b"\x05" * 32)


def test_pipelined_requests_answered_out_of_order(pair):
    client, server = pair
    rids = [client.send_request(Op.PING, b"") for _ in range(4)]
    assert len(deliver(client, server)) == 4
    for rid in reversed(rids):
        server.send_response(rid, b"")
    assert [e.request_id for e in deliver(server, client)] == list(reversed(rids))
    assert client.open_outbound == 0


def test_error_answer(pair):
    client, server = pair
    rid = client.send_request(Op.DELETE, messages.KeyOnly(KEY).encode())
    deliver(client, server)
    assert server.send_error(rid, ErrorCode.NOT_FOUND, "no such share")
    [event] = deliver(server, client)
    assert isinstance(event, ErrorReceived) and event.request_id == rid
    assert event.error.code == ErrorCode.NOT_FOUND and event.error.message == "no such share"
    assert client.open_outbound == 0 and server.open_inbound == 0
    # Only one answer per request.
    assert not server.send_error(rid, ErrorCode.INTERNAL, "again")
    assert not server.send_response(rid, b"")
    assert wire(server) == b""


def test_responses_and_errors_for_ids_not_open_are_protocol_errors(pair):
    client, server = pair
    for frame in (encode_frame(FrameType.RESPONSE, Op.PING, FLAG_END, 7),
                  encode_frame(FrameType.ERROR, 0, FLAG_END, 7, b"\x00\x04")):
        with pytest.raises(FrameError) as excinfo:
            Session(tls_client=True).receive(encode_frame(
                FrameType.HELLO, 0, FLAG_END, 0, hello().encode()) + frame)
        assert excinfo.value.code == ErrorCode.PROTOCOL


def test_a_response_for_another_op_is_a_protocol_error(pair):
    client, server = pair
    rid = client.send_request(Op.PING, b"")
    with pytest.raises(FrameError):
        client.receive(encode_frame(FrameType.RESPONSE, Op.STATS, FLAG_END, rid, b"{}"))


def test_a_response_that_cannot_stream_is_a_protocol_error(pair):
    client, server = pair
    rid = client.send_request(Op.PING, b"")
    with pytest.raises(FrameError) as excinfo:
        client.receive(encode_frame(FrameType.RESPONSE, Op.PING, 0, rid))
    assert excinfo.value.code == ErrorCode.PROTOCOL


def test_a_malformed_response_body_fails_that_request_only(pair):
    client, server = pair
    rid = client.send_request(Op.VERIFY, messages.VerifyRequest(KEY, b"n").encode())
    deliver(client, server)
    server.send_response(rid, b"short digest")
    [event] = deliver(server, client)
    assert isinstance(event, ErrorReceived) and event.request_id == rid
    assert event.error.code == ErrorCode.MALFORMED
    assert client.open_outbound == 0
    ping_works(client, server)


def test_a_malformed_streaming_response_head_cancels_the_stream(pair):
    client, server = pair
    rid = client.send_request(Op.RETRIEVE, messages.RetrieveRequest(KEY).encode())
    deliver(client, server)
    server.send_response(rid, b"\x00\x00", end=False)  # a total needs 8 bytes
    server.send_response_data(rid, b"abc", end=False)
    events = deliver(server, client)
    assert len(events) == 1 and events[0].error.code == ErrorCode.MALFORMED
    assert client.open_outbound == 0
    assert [(f.type, f.request_id) for f in frames(client)] == [(FrameType.CANCEL, rid)]
    assert client.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"d")) == []


def test_a_malformed_error_body_fails_that_request_only(pair):
    client, server = pair
    rid = client.send_request(Op.PING, b"")
    deliver(client, server)
    [event] = client.receive(encode_frame(FrameType.ERROR, 0, FLAG_END, rid, b"\x00"))
    assert isinstance(event, ErrorReceived) and event.error.code == ErrorCode.MALFORMED
    assert client.open_outbound == 0


# ---- streaming -----------------------------------------------------------------

def test_streaming_store(pair):
    client, server = pair
    data = b"abcdefghij"
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, len(data), data[:3]).encode(),
                              end=False)
    client.send_request_data(rid, data[3:7], end=False)
    client.send_request_data(rid, data[7:], end=True)
    client.send_request_data(rid, b"ignored", end=True)  # the stream is over
    events = deliver(client, server)
    assert events == [
        RequestReceived(rid, Op.STORE, messages.StoreRequest(KEY, 0, 10, b"abc"), False),
        RequestData(rid, b"defg", False),
        RequestData(rid, b"hij", True),
    ]
    assert server.open_inbound == 1 and rid not in server._inbound_streaming
    # A DATA after the END has no open stream to go to.
    with pytest.raises(FrameError) as excinfo:
        server.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"more"))
    assert excinfo.value.code == ErrorCode.PROTOCOL


def test_streaming_store_split_into_bytes(pair):
    client, server = pair
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 10, b"").encode(), end=False)
    for i in range(10):
        client.send_request_data(rid, bytes([65 + i]), end=i == 9)
    stream = wire(client)
    events = []
    for i in range(len(stream)):
        events += server.receive(stream[i:i + 1])
    assert b"".join(e.data for e in events[1:]) == b"ABCDEFGHIJ"
    assert [e.end for e in events] == [False] * 10 + [True]


def test_only_store_may_stream_a_request(pair):
    client, server = pair
    with pytest.raises(FrameError) as excinfo:
        server.receive(encode_frame(FrameType.REQUEST, Op.DELETE, 0, 1, KEY))
    assert excinfo.value.code == ErrorCode.PROTOCOL


def test_streaming_retrieve_response(pair):
    client, server = pair
    rid = client.send_request(Op.RETRIEVE, messages.RetrieveRequest(KEY).encode())
    deliver(client, server)
    assert server.send_response(rid, messages.RetrieveResponse(9, b"abc").encode(), end=False)
    assert server.send_response_data(rid, b"def", end=False)
    assert server.send_response_data(rid, b"ghi", end=True)
    assert not server.send_response_data(rid, b"late", end=True)
    assert server.open_inbound == 0
    events = deliver(server, client)
    assert events == [
        ResponseReceived(rid, Op.RETRIEVE, messages.RetrieveResponse(9, b"abc"), False),
        ResponseData(rid, b"def", False),
        ResponseData(rid, b"ghi", True),
    ]
    assert client.open_outbound == 0
    with pytest.raises(FrameError):
        client.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"x"))


def test_an_error_in_the_middle_of_a_streamed_response(pair):
    client, server = pair
    rid = client.send_request(Op.RETRIEVE, messages.RetrieveRequest(KEY).encode())
    deliver(client, server)
    server.send_response(rid, messages.RetrieveResponse(9).encode(), end=False)
    server.send_response_data(rid, b"abc", end=False)
    assert server.send_error(rid, ErrorCode.INTERNAL, "disk went away")
    events = deliver(server, client)
    assert [type(e) for e in events] == [ResponseReceived, ResponseData, ErrorReceived]
    assert client.open_outbound == 0


def test_an_early_error_drops_the_rest_of_the_stream(pair):
    client, server = pair
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 10, b"ab").encode(), end=False)
    deliver(client, server)
    server.send_error(rid, ErrorCode.NO_SPACE, "full")
    # The client sent more before it saw the error: dropped without a word.
    client.send_request_data(rid, b"cdefgh", end=False)
    assert deliver(client, server) == []
    [err] = deliver(server, client)
    assert err.error.code == ErrorCode.NO_SPACE
    client.send_request_data(rid, b"ij", end=True)  # now a no-op on the client
    assert wire(client) == b""
    assert server.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"ij")) == []
    ping_works(client, server)


def test_an_early_response_drops_the_rest_of_the_stream(pair):
    # A responder may answer a streaming request before its END (the requester
    # stops sending when it sees the answer); the DATA already on its way must
    # be dropped, not taken for a protocol error.
    client, server = pair
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 10, b"ab").encode(), end=False)
    deliver(client, server)
    assert server.send_response(rid, b"")
    client.send_request_data(rid, b"cdefgh", end=False)
    assert deliver(client, server) == []
    [answer] = deliver(server, client)
    assert isinstance(answer, ResponseReceived) and answer.end
    client.send_request_data(rid, b"ij", end=True)
    assert wire(client) == b""
    ping_works(client, server)


# ---- BUSY -----------------------------------------------------------------------

def test_busy_after_max_inflight():
    client, server = Session(tls_client=True), Session(tls_client=False, max_inflight=2)
    client.send_hello(hello())
    server.receive(wire(client))
    store = messages.StoreRequest(KEY, 0, 10, b"a").encode()
    first = client.send_request(Op.STORE, store, end=False)
    second = client.send_request(Op.PING, b"")
    busy = client.send_request(Op.STORE, store, end=False)
    events = server.receive(wire(client))
    assert [e.request_id for e in events] == [first, second]
    [out] = frames(server)
    assert (out.type, out.request_id) == (FrameType.ERROR, busy)
    assert messages.ErrorBody.decode(out.payload).code == ErrorCode.BUSY.wire
    assert server.open_inbound == 2

    # The refused stream's DATA is dropped silently; the open one's goes through.
    client.send_request_data(busy, b"bcd", end=False)
    client.send_request_data(first, b"bcd", end=False)
    client.send_request_data(busy, b"efghij", end=True)
    events = server.receive(wire(client))
    assert events == [RequestData(first, b"bcd", False)]
    assert wire(server) == b""

    # Once a slot frees up, new requests are accepted again.
    server.send_response(second, b"")
    third = client.send_request(Op.PING, b"")
    [event] = server.receive(wire(client))
    assert event.request_id == third


def test_busy_counts_requests_not_frames():
    client, server = Session(tls_client=True), Session(tls_client=False, max_inflight=1)
    client.send_hello(hello())
    server.receive(wire(client))
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 10, b"").encode(), end=False)
    for _ in range(5):
        client.send_request_data(rid, b"ab", end=False)
    events = server.receive(wire(client))
    assert len(events) == 6 and wire(server) == b""


# ---- CANCEL -----------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["client-asks", "server-asks"])
def test_cancel(pair, direction):
    client, server = pair
    asker, answerer = (client, server) if direction == "client-asks" else (server, client)
    rid = asker.send_request(Op.RETRIEVE, messages.RetrieveRequest(KEY).encode())
    deliver(asker, answerer)
    asker.cancel(rid)
    assert asker.open_outbound == 0
    [cancel_frame] = FrameParser().feed(b"".join(asker.take_outbound()))
    assert (cancel_frame.type, cancel_frame.request_id, cancel_frame.payload) == \
        (FrameType.CANCEL, rid, b"")
    # Meanwhile the answerer had started to answer: those frames cross the CANCEL.
    answerer.send_response(rid, messages.RetrieveResponse(6, b"ab").encode(), end=False)
    answerer.send_response_data(rid, b"cd", end=False)
    crossing = wire(answerer)
    assert answerer.receive(encode_frame(FrameType.CANCEL, 0, FLAG_END, rid)) == [RequestCancelled(rid)]
    assert answerer.open_inbound == 0
    # After the cancel the answerer sends nothing more for it ...
    assert not answerer.send_response_data(rid, b"ef", end=True)
    assert not answerer.send_error(rid, ErrorCode.CANCELLED, "x")
    assert wire(answerer) == b""
    # ... and what crossed the cancel is dropped by the asker, as are late ends.
    assert asker.receive(crossing) == []
    assert asker.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"ef")) == []
    assert asker.receive(encode_frame(FrameType.ERROR, 0, FLAG_END, rid, b"\x00\x0b")) == []
    ping_works(asker, answerer)


def test_cancel_of_a_finished_request_crosses_its_answer(pair):
    client, server = pair
    rid = client.send_request(Op.PING, b"")
    deliver(client, server)
    server.send_response(rid, b"")
    client.cancel(rid)
    assert deliver(server, client) == []  # the answer is dropped: we cancelled
    assert deliver(client, server) == []  # the cancel is ignored: already answered
    ping_works(client, server)


def test_cancel_of_an_unknown_id_is_ignored(pair):
    client, server = pair
    client.cancel(99)  # never sent: nothing goes out
    assert wire(client) == b""
    assert server.receive(encode_frame(FrameType.CANCEL, 0, FLAG_END, 99)) == []
    assert server.receive(encode_frame(FrameType.CANCEL, 0, FLAG_END, 4)) == []
    ping_works(client, server)


def test_cancel_of_a_streaming_request_drops_its_late_data(pair):
    client, server = pair
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 10, b"ab").encode(), end=False)
    deliver(client, server)
    data_in_flight = encode_frame(FrameType.DATA, 0, 0, rid, b"cd")
    [event] = server.receive(encode_frame(FrameType.CANCEL, 0, FLAG_END, rid))
    assert event == RequestCancelled(rid)
    assert server.receive(data_in_flight) == []
    assert server.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rid, b"ef")) == []
    client.cancel(rid)
    client.send_request_data(rid, b"gh", end=True)
    assert [f.type for f in frames(client)] == [FrameType.CANCEL]


# ---- bad frames, bad bodies ---------------------------------------------------------

def test_data_for_an_unknown_id_is_a_protocol_error(pair):
    client, server = pair
    with pytest.raises(FrameError) as excinfo:
        server.receive(encode_frame(FrameType.DATA, 0, FLAG_END, 41, b"x"))
    assert excinfo.value.code == ErrorCode.PROTOCOL


@pytest.mark.parametrize("op", [0, 4, 99, 255])
def test_unknown_op_is_answered_not_a_disconnect(pair, op):
    client, server = pair
    rid = client.send_request(op, b"whatever")
    assert deliver(client, server) == []
    [event] = deliver(server, client)
    assert isinstance(event, ErrorReceived) and event.request_id == rid
    assert event.error.code == ErrorCode.UNKNOWN_OP
    ping_works(client, server)


@pytest.mark.parametrize("op,body", [
    (Op.RETRIEVE, b"\x00" * 10),
    (Op.VERIFY, messages.RetrieveRequest(KEY).encode() + b"\x00"),
    (Op.DELETE, b"k" * 31),
    (Op.DELETE, b"k" * 33),
    (Op.PING, b"x"),
    (Op.PEERS, struct.pack(">H", 2000)),
    (Op.STORE, struct.pack(">32sBQ", KEY, 5, 3) + b"abc"),
])
def test_malformed_body_is_answered_and_the_session_continues(pair, op, body):
    client, server = pair
    rid = client.send_request(op, body)
    assert deliver(client, server) == []
    [event] = deliver(server, client)
    assert event.request_id == rid and event.error.code == ErrorCode.MALFORMED
    assert server.open_inbound == 0
    ping_works(client, server)


def test_malformed_streaming_store_drops_its_data(pair):
    client, server = pair
    rid = client.send_request(Op.STORE, struct.pack(">32sBQ", KEY, 9, 10), end=False)
    client.send_request_data(rid, b"abcde", end=False)
    client.send_request_data(rid, b"fghij", end=True)
    assert deliver(client, server) == []
    [event] = deliver(server, client)
    assert event.error.code == ErrorCode.MALFORMED
    ping_works(client, server)


def test_too_large_root_record_is_answered(pair):
    client, server = pair
    rid = client.send_request(Op.ROOT_PUT, b"r" * (messages.MAX_ROOT_RECORD + 1))
    assert deliver(client, server) == []
    [event] = deliver(server, client)
    assert event.request_id == rid and event.error.code == ErrorCode.TOO_LARGE


def test_a_bad_frame_header_is_a_frame_error(pair):
    client, server = pair
    with pytest.raises(FrameError) as excinfo:
        server.receive(struct.pack(">IBBBBI", 0, FrameType.REQUEST, Op.PING, FLAG_END, 1, 1))
    assert excinfo.value.code == ErrorCode.MALFORMED


def test_a_closed_session_ignores_input(pair):
    client, server = pair
    server.close()
    assert server.receive(b"\xff" * 100) == []


def test_take_outbound_joins_small_frames_and_keeps_big_ones_apart(pair):
    client, server = pair
    rid = client.send_request(Op.STORE, messages.StoreRequest(KEY, 0, 300000, b"").encode(), end=False)
    big = b"B" * 200000
    client.send_request_data(rid, b"s1", end=False)
    client.send_request_data(rid, big, end=False)
    client.send_request_data(rid, b"s2" * 50000, end=True)
    chunks = client.take_outbound()
    assert big in chunks  # not copied into a joined buffer
    assert len(chunks) == 4  # [REQUEST+DATA header+s1+header], big, [header], s2...
    events = server.receive(b"".join(bytes(c) for c in chunks))
    assert b"".join(e.data for e in events[1:]) == b"s1" + big + b"s2" * 50000
    assert client.take_outbound() == []


def test_remote_error_keeps_unknown_codes():
    error = RemoteError(999, "future")
    assert error.code == "CODE_999" and error.wire_code == 999 and "code 999" in str(error)


def test_refused_streams_are_remembered_within_a_bound():
    """A peer that opens many uploads it never finishes cannot grow our state:
    beyond the bound the oldest is forgotten, and its late DATA closes."""
    from flud.protocol.codec import FLAG_END, FrameType, Op
    from tests.unit.protocol.helpers import encode_frame
    from flud.protocol.errors import FrameError
    from flud.protocol.messages import Hello, PROTOCOL_VERSION, ROLE_NODE, StoreRequest
    server = Session(tls_client=False, max_inflight=4)
    server.receive(encode_frame(FrameType.HELLO, 0, FLAG_END, 0,
                                Hello(PROTOCOL_VERSION, ROLE_NODE, 0, b"k", b"s").encode()))
    rids = list(range(1, 2 * 10, 2))
    for rid in rids:
        body = StoreRequest(b"\x00" * 32, 0, 10, b"ab").encode()
        server.receive(encode_frame(FrameType.REQUEST, Op.STORE, 0, rid, body))
        server.send_error(rid, 5, "refused")
    assert len(server._rejected_streams) == 4
    # the most recent refused stream's DATA is still dropped quietly...
    assert server.receive(encode_frame(FrameType.DATA, 0, FLAG_END, rids[-1], b"x")) == []
    # ...the forgotten one's closes the connection
    with pytest.raises(FrameError):
        server.receive(encode_frame(FrameType.DATA, 0, 0, rids[0], b"x"))
