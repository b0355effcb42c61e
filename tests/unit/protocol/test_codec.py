"""Codec and message bodies, checked against docs/protocol.md itself.

The examples and tables are parsed out of the doc, so the doc and the code
cannot drift apart without a test failing.
"""

from __future__ import annotations

import pathlib
import re
import struct

import pytest

from flud.protocol import codec, connection, messages, session
from flud.protocol.codec import (FLAG_END, HEADER_SIZE, MAX_FRAME_PAYLOAD, Frame,
                                 FrameParser, FrameType, Op, Placed)
from flud.protocol.errors import ErrorCode, FrameError, RemoteError
from flud.protocol.messages import (KIND_ARCHIVE, KIND_SHARE, KIND_STREAMED_SHARE, MAX_NONCE,
                                    MAX_PEERS_LIST, MAX_ROOT_RECORD, NO_KEY, TO_END)
from flud.keys import Identity
from flud.protocol.node_record import Address, sign_record
from tests.unit.protocol.helpers import encode_frame, key_of

DOC = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
KEY = key_of(b"abc")


def unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def doc_table(heading: str) -> list[list[str]]:
    """Rows of the first markdown table after `heading`, cells stripped of backticks."""
    start = DOC.index(heading)
    rows = []
    for line in DOC[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("- "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def malformed(excinfo) -> None:
    assert type(excinfo.value) is RemoteError
    assert excinfo.value.code == ErrorCode.MALFORMED


# ---- the doc's examples ---------------------------------------------------------

def test_ping_request_example_bytes():
    m = re.search(r"PING request, rid (\d+):\s*`([0-9a-f ]+)`", DOC)
    assert m, "the PING request example is missing from docs/protocol.md"
    rid, wire_bytes = int(m.group(1)), unhex(m.group(2))
    assert encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, rid, messages.Empty().encode()) == wire_bytes
    [frame] = FrameParser().feed(wire_bytes)
    assert (frame.type, frame.op, frame.end, frame.request_id, frame.payload) == \
        (FrameType.REQUEST, Op.PING, True, rid, b"")


def test_ping_response_example_bytes():
    m = re.search(r"PING request, rid (\d+):.*?PING response:\s*`([0-9a-f ]+)`", DOC, re.S)
    assert m
    rid, wire_bytes = int(m.group(1)), unhex(m.group(2))
    assert encode_frame(FrameType.RESPONSE, Op.PING, FLAG_END, rid, b"") == wire_bytes


def test_store_example_bytes():
    m = re.search(r"STORE of the 3 bytes `(\w+)` \(key = BLAKE3\(\"(\w+)\"\)\), rid (\d+), "
                  r"all inline:\s*header `([0-9a-f ]+)`, body\s*`([0-9a-f ]+)`", DOC, re.S)
    assert m, "the STORE example is missing from docs/protocol.md"
    data = m.group(1).encode()
    assert m.group(2).encode() == data
    rid, header, body = int(m.group(3)), unhex(m.group(4)), unhex(m.group(5))
    # The body's key really is BLAKE3 of the data.
    assert body[:32] == key_of(data)

    request = messages.StoreRequest(key_of(data), KIND_SHARE, len(data), data)
    encoded = encode_frame(FrameType.REQUEST, Op.STORE, FLAG_END, rid, request.encode())
    assert encoded == header + body
    assert len(header) == HEADER_SIZE

    [frame] = FrameParser().feed(header + body)
    assert (frame.type, frame.op, frame.end, frame.request_id) == (FrameType.REQUEST, Op.STORE, True, rid)
    assert messages.decode_request(frame.op, frame.payload) == request


def test_streamed_store_example_bytes():
    m = re.search(r"The same as a streamed share, rid (\d+): header `([0-9a-f ]+)`, body\s*`([0-9a-f \n]+)`", DOC)
    assert m, "the streamed STORE example is missing from docs/protocol.md"
    rid, header, body = int(m.group(1)), unhex(m.group(2)), unhex(m.group(3))
    data = b"abc"
    request = messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, len(data), data + key_of(data))
    assert encode_frame(FrameType.REQUEST, Op.STORE, FLAG_END, rid, request.encode()) == header + body
    assert messages.decode_request(Op.STORE, body) == request


# ---- the doc's tables ------------------------------------------------------------

def test_frame_types_match_the_doc():
    m = re.search(r"\| 4 \| 1 \| type: ([^|]+)\|", DOC)
    doc_types = dict((name, int(num)) for num, name in re.findall(r"(\d+) ([A-Z]+)", m.group(1)))
    assert doc_types == {t.name: int(t) for t in FrameType}


def test_ops_match_the_doc():
    rows = doc_table("## 4. Operations")
    doc_ops = {row[1]: int(row[0]) for row in rows}
    assert doc_ops == {op.name: int(op) for op in Op if op is not Op.NONE}
    assert set(messages.BODIES) == {op for op in Op if op is not Op.NONE}


def test_error_codes_match_the_doc():
    rows = doc_table("## 5. Errors")
    assert {row[1]: int(row[0]) for row in rows} == {c.name: c.wire for c in ErrorCode}


def test_limits_match_the_doc():
    rows = {row[0]: row[1] for row in doc_table("## 3. Limits")}
    sizes = {"4 MiB + 4 KiB": 4 * 1024 * 1024 + 4096, "1 MiB": 1 << 20, "256": 256,
             "64 bytes": 64, "1024 entries": 1024, "64 KiB": 64 * 1024,
             "10 s": 10.0, "120 s without a frame and nothing open": 120.0}
    expected = {
        "MAX_FRAME_PAYLOAD": codec.MAX_FRAME_PAYLOAD,
        "DATA_CHUNK (what senders use)": codec.DATA_CHUNK,
        "MAX_INFLIGHT (open requests from one peer)": session.MAX_INFLIGHT,
        "MAX_NONCE": messages.MAX_NONCE,
        "MAX_PEERS_LIST": messages.MAX_PEERS_LIST,
        "MAX_ROOT_RECORD": messages.MAX_ROOT_RECORD,
        "HANDSHAKE_TIMEOUT": connection.HANDSHAKE_TIMEOUT,
        "IDLE_TIMEOUT": connection.IDLE_TIMEOUT,
    }
    for name, value in expected.items():
        assert sizes[rows[name]] == value, name


# ---- every message round-trips --------------------------------------------------

_IDENTITY = Identity.generate()


def _entry(i=1, host="10.0.0.1", port=4000, alive=True, sequence=None):
    record = sign_record(_IDENTITY, i if sequence is None else sequence, 2_000_000_000,
                         [Address.tcp(host, port)])
    return messages.PeerEntry(record, alive)


def _hello():
    return messages.Hello(1, messages.ROLE_CLIENT, 0, b"\x30" * 91, b"\x30" * 71, "")


ROUND_TRIPS = [
    messages.Hello(1, messages.ROLE_NODE, 4001, b"k" * 91, b"s" * 72, "node.example"),
    _hello(),
    messages.Hello(1, messages.ROLE_NODE, 65535, b"k" * messages.MAX_PUBLIC_KEY,
                   b"s" * messages.MAX_SIGNATURE, "h" * 255),
    messages.Empty(),
    messages.PeerList([]),
    messages.PeerList([_entry(1), _entry(2, "::1", 1, alive=False), _entry(3, "node.example", 2)]),
    messages.PeerList([_entry(i, "h", i + 1) for i in range(MAX_PEERS_LIST)]),
    messages.Stats({"shares": 3, "nested": {"a": [1, 2]}, "text": "é"}),
    messages.StoreRequest(KEY, KIND_SHARE, 3, b"abc"),
    messages.StoreRequest(KEY, KIND_ARCHIVE, 10 ** 9, b""),
    messages.StoreRequest(KEY, KIND_SHARE, 0),
    messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, 3, b"abc" + KEY),
    messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, 10 ** 7, b"a" * 1000),
    messages.RetrieveRequest(KEY),
    messages.RetrieveRequest(KEY, 5, 7),
    messages.RetrieveResponse(0),
    messages.RetrieveResponse(10, b"0123"),
    messages.RetrieveResponse(4, b"0123"),
    messages.VerifyRequest(KEY, b"n"),
    messages.VerifyRequest(KEY, b"n" * MAX_NONCE, 3, 9),
    messages.Digest(b"d" * 32),
    messages.KeyOnly(KEY),
    messages.Record(b""),
    messages.Record(b"r" * MAX_ROOT_RECORD),
    messages.ErrorBody(ErrorCode.NOT_FOUND.wire, "no such share"),
    messages.ErrorBody(999, "a code from the future"),
]


@pytest.mark.parametrize("message", ROUND_TRIPS, ids=lambda m: type(m).__name__)
def test_message_round_trips(message):
    decoded = type(message).decode(message.encode())
    assert decoded == message
    assert decoded.encode() == message.encode()


@pytest.mark.parametrize("op", [op for op in Op if op is not Op.NONE], ids=lambda op: op.name)
def test_every_op_round_trips_through_its_request_and_response_types(op):
    samples = {
        messages.Empty: messages.Empty(),
        messages.PeerList: messages.PeerList([_entry(9, "a", 1)]),
        messages.Stats: messages.Stats({"x": 1}),
        messages.StoreRequest: messages.StoreRequest(KEY, KIND_SHARE, 3, b"abc"),
        messages.RetrieveRequest: messages.RetrieveRequest(KEY, 1, 2),
        messages.RetrieveResponse: messages.RetrieveResponse(3, b"abc"),
        messages.VerifyRequest: messages.VerifyRequest(KEY, b"nonce", 1, 2),
        messages.Digest: messages.Digest(b"\x07" * 32),
        messages.KeyOnly: messages.KeyOnly(KEY),
        messages.Record: messages.Record(b"record"),
        messages.LinkBody: messages.LinkBody(b"link"),
        messages.DialBackRequest: messages.DialBackRequest(7400, "198.18.1.1"),
        messages.DialBackResponse: messages.DialBackResponse(messages.DIAL_OK, "::1", 51000),
        messages.Reservation: messages.Reservation(600),
        messages.Circuit: messages.Circuit(b"t" * 16),
        messages.FindNode: messages.FindNode(KEY, _entry(9, "a", 1).record),
        messages.FoundNodes: messages.FoundNodes([_entry(9, "a", 1).record]),
        messages.PunchConnect: messages.PunchConnect([("198.18.200.1", 7400)], 1),
        messages.PunchSync: messages.PunchSync(2),
        messages.Observed: messages.Observed("198.18.200.1", 40123),
    }
    request_type, response_type = messages.BODIES[op]
    request, response = samples[request_type], samples[response_type]
    assert messages.decode_request(op, request.encode()) == request
    assert messages.decode_response(op, response.encode()) == response


def test_error_body_is_bounded_and_code_is_kept():
    body = messages.ErrorBody(ErrorCode.INTERNAL, "x" * 5000).encode()
    assert len(body) == 2 + 1024
    decoded = messages.ErrorBody.decode(struct.pack(">H", 7) + b"y" * 3000)
    assert decoded.code == 7 and decoded.message == "y" * 1024


# ---- malformed bodies -------------------------------------------------------------

# (message, decoder) pairs whose every strict prefix must be MALFORMED.
FIXED_LAYOUTS = [
    (messages.Hello(1, messages.ROLE_NODE, 1, b"k" * 91, b"s" * 70, "host"), messages.Hello.decode),
    (messages.PeerList([_entry(1, "host", 1)] * 2), messages.PeerList.decode),
    (messages.StoreRequest(KEY, KIND_SHARE, 3, b""), messages.StoreRequest.decode),
    (messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, 3, b""), messages.StoreRequest.decode),
    (messages.RetrieveRequest(KEY, 1, 2), messages.RetrieveRequest.decode),
    (messages.RetrieveResponse(0), messages.RetrieveResponse.decode),
    (messages.VerifyRequest(KEY, b"nonce"), messages.VerifyRequest.decode),
    (messages.Digest(b"d" * 32), messages.Digest.decode),
    (messages.KeyOnly(KEY), messages.KeyOnly.decode),
    (messages.ErrorBody(4, ""), messages.ErrorBody.decode),
]


@pytest.mark.parametrize("message,decode", FIXED_LAYOUTS, ids=lambda x: type(x).__name__)
def test_truncated_bodies_are_malformed(message, decode):
    body = message.encode()
    for cut in range(len(body)):
        with pytest.raises(RemoteError) as excinfo:
            decode(body[:cut])
        malformed(excinfo)


@pytest.mark.parametrize("message,decode", [
    (messages.Hello(1, messages.ROLE_NODE, 1, b"k", b"s", "h"), messages.Hello.decode),
    (messages.Empty(), messages.Empty.decode),
    (messages.PeerList([_entry(1, "h", 1)]), messages.PeerList.decode),
    (messages.RetrieveRequest(KEY), messages.RetrieveRequest.decode),
    (messages.VerifyRequest(KEY, b"n"), messages.VerifyRequest.decode),
    (messages.Digest(b"d" * 32), messages.Digest.decode),
    (messages.KeyOnly(KEY), messages.KeyOnly.decode),
], ids=lambda x: type(x).__name__)
def test_trailing_bytes_are_malformed(message, decode):
    with pytest.raises(RemoteError) as excinfo:
        decode(message.encode() + b"\x00")
    malformed(excinfo)


def test_nonce_bounds():
    assert messages.VerifyRequest.decode(messages.VerifyRequest(KEY, b"n" * MAX_NONCE).encode()).nonce == b"n" * MAX_NONCE
    for size in (MAX_NONCE + 1, 255, 0):
        body = struct.pack(">32sQQB", KEY, 0, TO_END, size) + b"n" * size
        with pytest.raises(RemoteError) as excinfo:
            messages.VerifyRequest.decode(body)
        malformed(excinfo)


def test_too_many_peers_is_malformed_even_before_reading_them():
    raw = _entry().record.encode()
    entry = b"\x01" + struct.pack(">H", len(raw)) + raw
    ok = struct.pack(">H", MAX_PEERS_LIST) + entry * MAX_PEERS_LIST
    assert len(messages.PeerList.decode(ok).peers) == MAX_PEERS_LIST
    over = struct.pack(">H", MAX_PEERS_LIST + 1) + entry * (MAX_PEERS_LIST + 1)
    with pytest.raises(RemoteError) as excinfo:
        messages.PeerList.decode(over)
    malformed(excinfo)
    with pytest.raises(RemoteError) as excinfo:
        messages.PeerList.decode(struct.pack(">H", 0xFFFF))
    malformed(excinfo)


@pytest.mark.parametrize("role", [0, 3, 255])
def test_bad_role_is_malformed(role):
    body = messages.Hello(1, messages.ROLE_NODE, 1, b"k", b"s", "").encode()
    body = body[:2] + bytes([role]) + body[3:]
    with pytest.raises(RemoteError) as excinfo:
        messages.Hello.decode(body)
    malformed(excinfo)


def test_hello_length_bounds():
    big_key = messages.Hello(1, 1, 1, b"k" * (messages.MAX_PUBLIC_KEY + 1), b"s", "").encode()
    big_sig = messages.Hello(1, 1, 1, b"k", b"s" * (messages.MAX_SIGNATURE + 1), "").encode()
    bad_host = messages.Hello(1, 1, 1, b"k", b"s", "").encode()[:-1] + b"\x02\xff\xfe"
    for body in (big_key, big_sig, bad_host):
        with pytest.raises(RemoteError) as excinfo:
            messages.Hello.decode(body)
        malformed(excinfo)


@pytest.mark.parametrize("kind", [3, 7, 255])
def test_bad_store_kind_is_malformed(kind):
    body = struct.pack(">32sBQ", KEY, kind, 3) + b"abc"
    with pytest.raises(RemoteError) as excinfo:
        messages.StoreRequest.decode(body)
    malformed(excinfo)


def test_store_inline_bytes_over_its_size_are_malformed():
    with pytest.raises(RemoteError) as excinfo:
        messages.StoreRequest.decode(struct.pack(">32sBQ", KEY, 0, 2) + b"abc")
    malformed(excinfo)


def test_a_streamed_share_carries_its_key_after_its_size():
    body = struct.pack(">32sBQ", NO_KEY, KIND_STREAMED_SHARE, 3) + b"abc" + KEY
    request = messages.StoreRequest.decode(body)
    assert (request.kind_name, request.data_length, request.content_key) == ("streamed share", 35, None)
    assert (messages.StoreRequest(KEY, KIND_SHARE, 3).data_length,
            messages.StoreRequest(KEY, KIND_SHARE, 3).content_key) == (3, KEY)
    with pytest.raises(RemoteError) as excinfo:
        messages.StoreRequest.decode(body + b"x")
    malformed(excinfo)


@pytest.mark.parametrize("key", [KEY, b"\x00" * 31 + b"\x01"])
def test_a_streamed_share_with_a_key_field_is_malformed(key):
    with pytest.raises(RemoteError) as excinfo:
        messages.StoreRequest.decode(struct.pack(">32sBQ", key, KIND_STREAMED_SHARE, 3) + b"abc")
    malformed(excinfo)


def test_retrieve_response_over_its_total_is_malformed():
    with pytest.raises(RemoteError) as excinfo:
        messages.RetrieveResponse.decode(struct.pack(">Q", 2) + b"abc")
    malformed(excinfo)


def test_peer_record_that_does_not_parse_is_malformed():
    raw = bytearray(_entry().record.encode())
    address_at = 1 + 64 + 8 + 8 + 1 + 8 + 1 + 1
    raw[address_at] = 0xFF              # not ASCII
    body = struct.pack(">HBH", 1, 1, len(raw)) + bytes(raw)
    with pytest.raises(RemoteError) as excinfo:
        messages.PeerList.decode(body)
    malformed(excinfo)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"\xff\xfe", b""])
def test_stats_not_a_json_object_is_malformed(body):
    with pytest.raises(RemoteError) as excinfo:
        messages.Stats.decode(body)
    malformed(excinfo)


def test_stats_over_64k_is_too_large_both_ways():
    big = {"x": "y" * (64 * 1024)}
    with pytest.raises(RemoteError) as excinfo:
        messages.Stats(big).encode()
    assert excinfo.value.code == ErrorCode.TOO_LARGE
    with pytest.raises(RemoteError) as excinfo:
        messages.Stats.decode(b'{"x":"' + b"y" * (64 * 1024) + b'"}')
    assert excinfo.value.code == ErrorCode.TOO_LARGE


def test_root_record_over_limit_is_too_large():
    with pytest.raises(RemoteError) as excinfo:
        messages.Record.decode(b"r" * (MAX_ROOT_RECORD + 1))
    assert excinfo.value.code == ErrorCode.TOO_LARGE
    with pytest.raises(RemoteError) as excinfo:
        messages.decode_request(Op.ROOT_PUT, b"r" * (MAX_ROOT_RECORD + 1))
    assert excinfo.value.code == ErrorCode.TOO_LARGE


@pytest.mark.parametrize("op", [0, 4, 9, 14, 22, 255])
def test_unknown_op_is_unknown_op(op):
    with pytest.raises(RemoteError) as excinfo:
        messages.decode_request(op, b"")
    assert excinfo.value.code == ErrorCode.UNKNOWN_OP


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_encoding_refuses_a_key_that_is_not_32_bytes(size):
    # struct's "32s" would silently pad or cut such a key into another key.
    key = b"k" * size
    for message in (messages.StoreRequest(key, KIND_SHARE, 1, b"x"),
                    messages.RetrieveRequest(key), messages.VerifyRequest(key, b"n"),
                    messages.KeyOnly(key)):
        with pytest.raises(RemoteError) as excinfo:
            message.encode()
        assert excinfo.value.code == ErrorCode.BAD_KEY


# ---- frames ----------------------------------------------------------------------

SAMPLE_FRAMES = [
    Frame(FrameType.HELLO, 0, FLAG_END, 0, b"hello body"),
    Frame(FrameType.REQUEST, Op.PING, FLAG_END, 1, b""),
    Frame(FrameType.REQUEST, Op.STORE, 0, 3, b"s" * 300),
    Frame(FrameType.DATA, 0, 0, 3, b""),
    Frame(FrameType.DATA, 0, FLAG_END, 3, bytes(range(256)) * 3),
    Frame(FrameType.RESPONSE, Op.STORE, FLAG_END, 3, b""),
    Frame(FrameType.ERROR, 0, FLAG_END, 0xFFFFFFFF, b"\x00\x04no"),
    Frame(FrameType.CANCEL, 0, FLAG_END, 2, b""),
]


def encode(frame: Frame) -> bytes:
    return encode_frame(frame.type, frame.op, frame.flags, frame.request_id, frame.payload)


STREAM = b"".join(encode(f) for f in SAMPLE_FRAMES)


def test_many_frames_in_one_chunk():
    parser = FrameParser()
    assert parser.feed(STREAM) == SAMPLE_FRAMES
    assert parser.buffered == 0


def test_frames_split_at_every_byte_boundary():
    for cut in range(len(STREAM) + 1):
        parser = FrameParser()
        frames = parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:])
        assert frames == SAMPLE_FRAMES, cut
        assert parser.buffered == 0


def test_frames_fed_one_byte_at_a_time():
    parser = FrameParser()
    frames = []
    for i in range(len(STREAM)):
        frames += parser.feed(STREAM[i:i + 1])
    assert frames == SAMPLE_FRAMES
    assert parser.buffered == 0


def test_frames_split_in_three_pieces():
    for a in range(0, len(STREAM), 7):
        for b in range(a, len(STREAM), 13):
            parser = FrameParser()
            got = parser.feed(STREAM[:a]) + parser.feed(STREAM[a:b]) + parser.feed(STREAM[b:])
            assert got == SAMPLE_FRAMES


def test_zero_length_payloads_and_empty_feeds():
    parser = FrameParser()
    assert parser.feed(b"") == []
    frame = encode_frame(FrameType.DATA, 0, FLAG_END, 9, b"")
    assert len(frame) == HEADER_SIZE
    assert parser.feed(frame[:5]) == []
    assert parser.feed(b"") == []
    [got] = parser.feed(frame[5:])
    assert got.payload == b"" and got.end and got.request_id == 9
    assert parser.feed(frame * 3) == [got] * 3


def test_a_payload_waits_for_its_last_byte():
    frame = encode_frame(FrameType.DATA, 0, 0, 5, b"x" * 100)
    parser = FrameParser()
    assert parser.feed(frame[:-1]) == []
    assert parser.buffered == 99  # the header was consumed, the payload is held
    [got] = parser.feed(frame[-1:])
    assert got.payload == b"x" * 100 and not got.end


def test_a_diverted_data_payload_is_put_in_place_by_the_caller():
    payload = bytes(range(100))
    data = encode_frame(FrameType.DATA, 0, FLAG_END, 7, payload)
    ping = encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 9, b"")
    parser = FrameParser()
    assert parser.data_due() is None
    assert parser.feed(data[:HEADER_SIZE + 30]) == []
    assert parser.data_due() == (7, 100, 30)
    placed = bytearray(b"".join(bytes(p) for p in parser.divert()))
    assert placed == payload[:30] and parser._diverted == 70
    with pytest.raises(RuntimeError):
        parser.feed(b"more")  # the rest is the caller's to place
    with pytest.raises(RuntimeError):
        parser.placed(71)
    assert parser.placed(50) == [] and parser._diverted == 20
    [frame] = parser.placed(20)
    assert (frame.type, frame.request_id, frame.end) == (FrameType.DATA, 7, True)
    assert type(frame.payload) is Placed and len(frame.payload) == 100
    assert parser.data_due() is None and parser._diverted == 0
    [after] = parser.feed(ping)  # parsing goes on where the payload ended
    assert after.request_id == 9 and after.op == Op.PING


def test_only_a_data_payload_still_arriving_can_be_diverted():
    parser = FrameParser()
    parser.feed(encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 9, b"x" * 20)[:HEADER_SIZE + 5])
    assert parser.data_due() is None  # a message body is decoded whole
    with pytest.raises(RuntimeError):
        parser.divert()
    parser = FrameParser()
    data = encode_frame(FrameType.DATA, 0, 0, 3, b"y" * 40)
    parser.feed(data[:HEADER_SIZE])
    assert parser.data_due() == (3, 40, 0) and parser.divert() == []
    assert parser.placed(40)[0].payload.length == 40


def test_oversized_length_is_too_large_before_the_payload_arrives():
    header = struct.pack(">IBBBBI", MAX_FRAME_PAYLOAD + 1, FrameType.DATA, 0, 0, 0, 1)
    with pytest.raises(FrameError) as excinfo:
        FrameParser().feed(header)
    assert excinfo.value.code == ErrorCode.TOO_LARGE
    # Exactly at the limit is accepted (header only: the parser waits for the body).
    ok = struct.pack(">IBBBBI", MAX_FRAME_PAYLOAD, FrameType.DATA, 0, 0, 0, 1)
    assert FrameParser().feed(ok) == []


def test_max_payload_boundary_with_a_small_limit():
    parser = FrameParser(max_payload=10)
    assert parser.feed(encode_frame(FrameType.DATA, 0, 0, 1, b"x" * 10))[0].payload == b"x" * 10
    with pytest.raises(FrameError) as excinfo:
        parser.feed(encode_frame(FrameType.DATA, 0, 0, 1, b"x" * 11))
    assert excinfo.value.code == ErrorCode.TOO_LARGE


def test_encoding_an_oversized_frame_is_refused():
    with pytest.raises(FrameError) as excinfo:
        encode_frame(FrameType.DATA, 0, 0, 1, b"x" * (MAX_FRAME_PAYLOAD + 1))
    assert excinfo.value.code == ErrorCode.TOO_LARGE
    assert len(encode_frame(FrameType.DATA, 0, 0, 1, b"x" * MAX_FRAME_PAYLOAD)) == \
        HEADER_SIZE + MAX_FRAME_PAYLOAD


@pytest.mark.parametrize("frame_type", [6, 7, 100, 255])
def test_unknown_frame_type_is_malformed(frame_type):
    with pytest.raises(FrameError) as excinfo:
        FrameParser().feed(struct.pack(">IBBBBI", 0, frame_type, 0, FLAG_END, 0, 1))
    assert excinfo.value.code == ErrorCode.MALFORMED


@pytest.mark.parametrize("flags,reserved", [(0x02, 0), (0x80, 0), (0xFF, 0), (1, 1), (0, 0x80)])
def test_reserved_bits_are_malformed(flags, reserved):
    with pytest.raises(FrameError) as excinfo:
        FrameParser().feed(struct.pack(">IBBBBI", 0, FrameType.DATA, 0, flags, reserved, 1))
    assert excinfo.value.code == ErrorCode.MALFORMED


def test_a_bad_header_after_good_frames_in_the_same_chunk():
    good = encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 1)
    bad = struct.pack(">IBBBBI", 0, 9, 0, 0, 0, 3)
    with pytest.raises(FrameError):
        FrameParser().feed(good + bad)


def test_large_payload_split_in_tls_sized_records():
    payload = bytes(range(256)) * 4096  # 1 MiB
    frame = encode_frame(FrameType.DATA, 0, FLAG_END, 7, payload)
    parser = FrameParser()
    frames = []
    for i in range(0, len(frame), 16384):
        frames += parser.feed(memoryview(frame)[i:i + 16384])
    assert len(frames) == 1 and frames[0].payload == payload


def test_a_data_payload_split_on_the_way_is_handed_over_as_views_of_its_pieces():
    body = bytes(range(256)) * 64
    frame = encode_frame(FrameType.DATA, 0, FLAG_END, 3, body)
    cuts = [0, 5, HEADER_SIZE + 1000, HEADER_SIZE + 9000, len(frame)]
    chunks = [frame[a:b] for a, b in zip(cuts, cuts[1:])]
    parser = FrameParser()
    frames = [f for chunk in chunks for f in parser.feed(chunk)]
    [got] = frames
    payload = got.payload
    assert isinstance(payload, codec.Pieces) and len(payload) == len(body)
    parts = codec.pieces_of(payload)
    assert [len(p) for p in parts] == [1000, 8000, len(body) - 9000]
    assert all(isinstance(p, (bytes, memoryview)) for p in parts)
    assert b"".join(parts) == body and bytes(payload) == body and payload == body
    assert parser.buffered == 0


def test_control_frames_and_whole_data_frames_stay_one_buffer():
    parser = FrameParser()
    data = encode_frame(FrameType.DATA, 0, 0, 3, b"abc" * 10)
    request = encode_frame(FrameType.REQUEST, 1, 0, 3, b"x" * 50)
    first, second = parser.feed(request[:20]) + parser.feed(request[20:] + data)
    assert type(first.payload) is bytes and first.payload == b"x" * 50
    assert codec.pieces_of(second.payload) == (second.payload,) and second.payload == b"abc" * 10
