"""What a node's answer to a challenge or fetch says about the share."""
from typing import NamedTuple

from flud.client.repair.object_health import CORRUPT, MISSING, UNREACHABLE
from flud.protocol.errors import ErrorCode, RemoteError

# Errors that say the node holds the share but its bytes cannot be served
# right: counted corrupt. NOT_FOUND is missing; everything else (busy,
# cancelled, stalled, a dropped connection, a timeout) is unreachable.
_CORRUPT_CODES = {ErrorCode.HASH_MISMATCH, ErrorCode.BAD_RANGE, ErrorCode.BAD_ARCHIVE,
                  ErrorCode.INTERNAL}


def outcome_of(error) -> str:
    err = getattr(error, "value", error)
    if isinstance(err, RemoteError):
        if err.code == ErrorCode.NOT_FOUND:
            return MISSING
        if err.code in _CORRUPT_CODES:
            return CORRUPT
    return UNREACHABLE


class Probe(NamedTuple):
    """A recorded VERIFY challenge of a share: BLAKE3(nonce + bytes[offset:
    offset+length]) starts with `digest`."""
    nonce: bytes
    offset: int
    length: int
    digest: bytes
