"""Re-coding lost shares (pure: the caller runs it in its CPU pool).

zfec is deterministic and a share's key is the BLAKE3 of its bytes, so a
share re-created from any k others is the very share that was lost: same
index, same bytes, same key. Nothing that names it changes (tree records,
challenges, the bundle's own record); only its holder does. That is checked
here, share by share, before anything is stored: a share that does not come
out with its recorded key means the k inputs or the records are wrong, and
storing it would put a share under a key it does not match.
"""
from typing import Mapping

import blake3

from flud.coding import Buffer, SegmentCoder
from flud.errors import FludError


class RecodeMismatch(FludError):
    """A re-created share does not match the key its object records."""

    code = "RECODE_MISMATCH"


def share_key(data: Buffer) -> str:
    return blake3.blake3(data).hexdigest()


def recode(coder: SegmentCoder, fetched: Mapping[int, Buffer],
           lost: Mapping[int, str]) -> dict:
    """{index: bytes} of the lost shares ({index: recorded key hex}), from
    any k fetched shares ({index: bytes}, each already checked against its
    own key by the caller)."""
    made = coder.recreate(fetched, sorted(lost))
    out = {}
    for index, data in made.items():
        data = bytes(data)
        if share_key(data) != lost[index]:
            raise RecodeMismatch(
                f"share {index} re-created from shares {sorted(fetched)} does not match "
                f"its recorded key {lost[index][:16]}...: not stored")
        out[index] = data
    return out
