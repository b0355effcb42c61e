"""A check's challenges from the ones a backup recorded (the index, the
manifest): the same VERIFY `flud verify` asks, so a repaired share (the
same bytes under the same key) answers its old challenges unchanged."""
from typing import Optional

from flud.client.records import Challenge, ShareHolder
from flud.client.repair.answers import Probe
from flud.client.repository.segments import challenge_nonce
from flud.client.repository.share_challenges import challenge_index


def probe_of(secret: bytes, share: ShareHolder, rows, round_number: int = 0,
             full: bool = False) -> Optional[Probe]:
    """The Probe for one of a share's recorded challenges (rows as written:
    [offset, span, digest] with the nonce derived from the share's key, or
    [offset, span, digest, nonce] for a stream's): the whole-share one, or
    in turn with the spot check, as verify.challenge_index picks. None when
    nothing is recorded (the job then downloads the share instead)."""
    if not rows:
        return None
    index = challenge_index(round_number, len(rows), full)
    challenge = Challenge.from_wire(rows[index])
    key = bytes.fromhex(share.key)
    nonce = (bytes.fromhex(challenge.nonce) if challenge.nonce is not None
             else challenge_nonce(secret, key, index))
    return Probe(nonce, challenge.offset, challenge.span, bytes.fromhex(challenge.digest))
