"""The VERIFY challenges of the shares this home stored, by share key
(the challenges table)."""
from flud.client.index_rows import IndexRows, _pack, _unpack


class ShareChallengeRows(IndexRows):
    """The challenges table."""

    def challenge_rows(self):
        """(share key hex, [[offset, span, digest hex], ...] as JSON bytes)."""
        return self._rows("SELECT share_key, record FROM challenges")

    def add_challenges(self, items, transaction: bool = True) -> None:
        """items: (share key hex, challenges) as segments.challenges_for()."""
        self._replace_rows("challenges", 2, ((key, _pack(record)) for key, record in items),
                           transaction)

    def challenges(self, share_key: str):
        row = self.db.execute("SELECT record FROM challenges WHERE share_key=?",
                              (share_key,)).fetchone()
        return _unpack(row[0]) if row else None
