import blake3

from flud.client.records import ShareHolder
from flud.client.repair.probes import probe_of
from flud.client.repository.segments import challenges_for

SECRET = b"s" * 32


def _answer(share: bytes, probe) -> bytes:
    # what a node answers: BLAKE3(nonce + the range), the first bytes compared
    return blake3.blake3(probe.nonce + share[probe.offset:probe.offset + probe.length]).digest()


def test_recorded_challenges_become_probes_a_holder_of_the_bytes_answers():
    share = bytes(range(256)) * 1024
    key = blake3.blake3(share).digest()
    rows = [c.to_wire() for c in challenges_for(SECRET, key, share)]
    holder = ShareHolder(0, key.hex(), "00" * 32)
    for round_number in (0, 1):
        probe = probe_of(SECRET, holder, rows, round_number)
        assert _answer(share, probe)[:len(probe.digest)] == probe.digest
    whole = probe_of(SECRET, holder, rows, 1, full=True)
    assert (whole.offset, whole.length) == (0, len(share))
    other = bytes(len(share))
    assert _answer(other, whole)[:16] != whole.digest
    assert probe_of(SECRET, holder, []) is None


def test_a_streams_recorded_nonce_is_used_as_it_is():
    holder = ShareHolder(1, "ab" * 32, "00" * 32)
    probe = probe_of(SECRET, holder, [[0, 10, "cd" * 16, "ef" * 16]])
    assert probe.nonce == bytes.fromhex("ef" * 16) and probe.digest == bytes.fromhex("cd" * 16)
