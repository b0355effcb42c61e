"""The VERIFY challenges of shares: those of the shares a run sent, kept
packed until the run records them in the index; where a share's recorded
challenges are found (IndexChallenges); which of them a round asks
(challenge_index: verify and check ask the same, so a repaired share
answers its old challenges)."""
import struct

from flud.client.records import Challenge


class PackedChallenges:
    """The VERIFY challenges of the shares sent this run, packed: 88 bytes a
    share instead of ~560 as lists of ints and hex strings (2.3 MB for the
    4096 shares of a 1 GiB file, kept until the run ends)."""

    _ONE = struct.Struct(">QQ16s")  # offset, span, expected digest
    _KEY = 32

    def __init__(self):
        self._data = bytearray()
        self._count = 0

    def __len__(self):
        return self._count

    def update(self, challenges):
        """{share key hex: [Challenge], ...}, as challenges_for() (nonces derived)."""
        data = self._data
        for key_hex, items in challenges.items():
            key = bytes.fromhex(key_hex)
            if len(key) != self._KEY or len(items) > 255:
                raise ValueError(f"unexpected challenges for share {key_hex!r}")
            data += key
            data.append(len(items))
            for challenge in items:
                digest = bytes.fromhex(challenge.digest)
                if len(digest) != 16 or challenge.nonce is not None:
                    raise ValueError(f"unexpected challenge {challenge!r}")
                data += self._ONE.pack(challenge.offset, challenge.span, digest)
            self._count += 1

    def items(self):
        """(share key hex, [challenge as written]), in the order added."""
        view, pos, one = memoryview(self._data), 0, self._ONE
        while pos < len(view):
            key_hex = view[pos:pos + self._KEY].hex()
            count = view[pos + self._KEY]
            pos += self._KEY + 1
            items = []
            for _ in range(count):
                offset, span, digest = one.unpack_from(view, pos)
                pos += one.size
                items.append(Challenge(offset, span, digest.hex()).to_wire())
            yield key_hex, items


# A share's challenges, in the order they are recorded
# (segments.challenges_for, extents.StreamHashes.challenges).
WHOLE, SPOT = 0, 1


def challenge_index(round_number: int, count: int, full: bool = False) -> int:
    """Which of a share's `count` challenges a round asks."""
    if full or count < 2:
        return WHOLE
    return round_number % count


class IndexChallenges:
    """The VERIFY challenges of a version-2 snapshot: the local index's, or
    the holder map's (a total-loss home has none of its own); a version-1
    manifest carried its own. sources: objects with challenges(share key)."""

    def __init__(self, *sources):
        self._sources = sources

    def get(self, share_key, default=None):
        for source in self._sources:
            found = source.challenges(share_key)
            if found is not None:
                return found
        return default
