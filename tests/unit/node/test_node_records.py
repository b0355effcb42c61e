"""Signed node records and the membership view built from them: nobody can
put an entry in a node's view for a key they lack, a newer record moves a
node, an expired one drops out, and a full view keeps its live peers."""
import random
import struct
from types import SimpleNamespace

import pytest
from twisted.internet.task import Clock

from flud.keys import Identity
from flud.node.own_record import OwnRecord
from flud.node.peers import MAX_PEERS, Membership
from flud.protocol import messages
from flud.protocol.node_record import (MAX_LIFETIME, RECORD_LIFETIME, Address, RecordRefused,
                                       check_record, decode_record, sign_record)

NOW = 1_800_000_000
IDS = [Identity.generate() for _ in range(4)]


def record(identity, sequence=1, host="10.0.0.1", port=4000, expires=NOW + 3600, **kw):
    return sign_record(identity, sequence, expires, [Address.tcp(host, port)], **kw)


def refusal(fn, *args):
    with pytest.raises(RecordRefused) as excinfo:
        fn(*args)
    return excinfo.value.code


# ---- the record ---------------------------------------------------------------

def test_a_record_round_trips_and_names_its_key():
    rec = sign_record(IDS[0], 7, NOW + 60, [Address.tcp("10.0.0.1", 4000),
                                            Address.tcp("2001:db8::1", 4001),
                                            Address("relay", relay_id=IDS[1].node_id)],
                      capacity=123)
    back = decode_record(rec.encode())
    assert back == rec
    assert back.node_id == IDS[0].node_id
    assert [a.text() for a in back.addresses] == [
        "tcp:10.0.0.1:4000", "tcp6:[2001:db8::1]:4001", "relay:" + IDS[1].node_id.hex()]
    assert check_record(back, NOW) is back


def test_every_changed_byte_is_refused():
    rec = record(IDS[0])
    raw = rec.encode()
    for at in list(range(0, len(rec.body()), 3)) + list(range(len(rec.body()) + 1, len(raw))):
        tampered = bytearray(raw)
        tampered[at] ^= 0x01
        try:
            rec = decode_record(bytes(tampered))
        except RecordRefused as refused:
            assert refused.code in ("RECORD_MALFORMED", "RECORD_VERSION")
            continue
        assert refusal(check_record, rec, NOW) in ("RECORD_BAD_SIGNATURE", "RECORD_EXPIRED",
                                                   "RECORD_TOO_LONG")


def test_a_key_cannot_sign_for_another_id():
    # the id is the hash of the key in the record: swap the key, the signature fails
    mine, theirs = record(IDS[0]), record(IDS[1])
    forged = decode_record(theirs.encode()[:1] + mine.public_xy + theirs.encode()[65:])
    assert forged.node_id == IDS[0].node_id
    assert refusal(check_record, forged, NOW) == "RECORD_BAD_SIGNATURE"


def test_expired_and_too_long_lived_records_are_refused():
    assert refusal(check_record, record(IDS[0], expires=NOW - 3600), NOW) == "RECORD_EXPIRED"
    assert refusal(check_record, record(IDS[0], expires=NOW + MAX_LIFETIME + 3600),
                   NOW) == "RECORD_TOO_LONG"


@pytest.mark.parametrize("text", ["udp:1.2.3.4:5", "tcp:1.2.3.4", "tcp:1.2.3.4:0",
                                  "tcp:1.2.3.4:70000", "tcp6:1.2.3.4:5", "tcp6:[nope]:5",
                                  "relay:abcd", "tcp:a b:5"])
def test_bad_address_hints_are_malformed(text):
    assert refusal(Address.parse, text) == "RECORD_MALFORMED"


def test_truncated_records_are_malformed():
    raw = record(IDS[0]).encode()
    for cut in range(len(raw)):
        assert refusal(decode_record, raw[:cut]) == "RECORD_MALFORMED"
    assert refusal(decode_record, raw + b"\x00") == "RECORD_MALFORMED"


# ---- the view -------------------------------------------------------------------

def view(clock=None):
    clock = clock or Clock()
    if not clock.seconds():
        clock.advance(NOW)
    me = IDS[3]
    return Membership(lambda: record(me, host="10.9.9.9"), clock, random.Random(1),
                      node_id=me.node_id)


def entry(rec, alive=True):
    return messages.PeerEntry(rec, alive)


def test_a_newer_record_moves_a_node_and_an_older_one_is_ignored():
    m = view()
    assert m.merge([entry(record(IDS[0], 5, port=4000))]) == 1
    m.merge([entry(record(IDS[0], 9, port=5000))])
    assert m.peers[IDS[0].node_id].port == 5000
    m.merge([entry(record(IDS[0], 6, port=6000))])      # a replay of an old record
    assert m.peers[IDS[0].node_id].port == 5000


def test_forged_and_expired_records_never_enter_the_view():
    m = view()
    good = record(IDS[0]).encode()
    forged = decode_record(good[:-3] + bytes([good[-3] ^ 1]) + good[-2:])
    m.merge([entry(forged), entry(record(IDS[1], expires=NOW - 9999))])
    assert m.peers == {}
    assert m.refused == {"RECORD_BAD_SIGNATURE": 1, "RECORD_EXPIRED": 1}


def test_records_expire_out_of_the_view():
    clock = Clock()
    clock.advance(NOW)
    m = view(clock)
    m.merge([entry(record(IDS[0], expires=NOW + 100))])
    clock.advance(50)
    assert m.expire() == 0
    clock.advance(400 + 300)
    assert m.expire() == 1 and m.peers == {}


def test_a_nodes_own_record_must_name_where_it_is_seen():
    m = view()
    source = SimpleNamespace(peer_id=IDS[0].node_id,
                             transport=SimpleNamespace(getPeer=lambda: SimpleNamespace(host="10.0.0.2")))
    m.merge([entry(record(IDS[0], host="10.0.0.1"))], source=source)
    assert m.refused == {"RECORD_ADDRESS_UNOBSERVED": 1} and m.peers == {}
    m.merge([entry(record(IDS[0], host="10.0.0.2"))], source=source)
    assert IDS[0].node_id in m.peers
    # a third party's record cannot be checked that way, and is taken
    m.merge([entry(record(IDS[1], host="10.0.0.7"))], source=source)
    assert IDS[1].node_id in m.peers


def test_a_full_view_makes_room_from_the_dead_never_from_the_live(monkeypatch):
    import flud.node.peers as peers
    monkeypatch.setattr(peers, "MAX_PEERS", 2)
    m = view()
    m.merge([entry(record(IDS[0])), entry(record(IDS[1]))])
    m.merge([entry(record(IDS[2]))])
    assert IDS[2].node_id not in m.peers and m.refused["RECORD_VIEW_FULL"] == 1
    for _ in range(2):
        m.mark_failed(IDS[1].node_id)
    m.merge([entry(record(IDS[2]))])
    assert set(m.peers) == {IDS[0].node_id, IDS[2].node_id}


def test_the_snapshot_carries_own_record_first_and_is_bounded():
    m = view()
    m.merge([entry(record(IDS[0]))])
    snap = m.snapshot()
    assert snap[0].record.node_id == IDS[3].node_id and len(snap) == 2
    assert len(snap) <= MAX_PEERS


def test_own_record_sequence_grows_across_restarts_even_when_the_clock_goes_back(tmp_path):
    now = [float(NOW)]
    first = OwnRecord(IDS[0], str(tmp_path), "127.0.0.1", 4000, clock=lambda: now[0])()
    now[0] -= 86400                      # the clock was set back a day
    second = OwnRecord(IDS[0], str(tmp_path), "127.0.0.1", 4001, clock=lambda: now[0])()
    assert second.sequence > first.sequence
    assert second.expires == int(now[0]) + RECORD_LIFETIME
    check_record(second, now[0])


def test_peer_list_bodies_carry_records_and_hints():
    first = record(IDS[0])
    body = messages.PeerList([entry(first, alive=False), entry(record(IDS[1]))]).encode()
    back = messages.PeerList.decode(body)
    assert [(e.node_id, e.alive) for e in back.peers] == [(IDS[0].node_id, False),
                                                          (IDS[1].node_id, True)]
    count, flags, length = struct.unpack_from(">HBH", body)
    assert (count, flags) == (2, 0) and length == len(first.encode())
