"""A restore's small files, fetched from their bundles' shares.

Most come by runs (small_runs.py): one ranged RETRIEVE of a primary share
block carries many files, and each is opened (decrypted and checked,
`open`) on a writer thread. A file that does not (its run failed, it failed
its check, or its block has no holder) comes alone, through the bundle
range reader (repository/bundle_ranges.py: its range from the primary
share, or rebuilt from k others). Every file is opened (decrypted,
decompressed if its record says so) and checked against its convergent key
before it is handed back."""
from flud.client.repository.bundle_ranges import BundleRangeReader
from flud.client.repository.small_contents import ContentCheckFailed, open_small


class SmallFetch(BundleRangeReader):
    """bundles: the manifest's bundle records as written. coder: a
    SegmentCoder of the bundles' k, n. report_bad(node hex, key hex, why): a
    share that failed; count_retrieves(n): RETRIEVEs made (both called on
    the reactor). open(content, ciphertext): the plaintext of a small
    file's stored bytes, or None if they are not the file the manifest
    recorded (its convergent key says); the one place a small file is
    opened. UnknownCompression (the record names a method this flud lacks)
    fails the file alone."""

    def __init__(self, ctx, bundles, coder, report_bad, count_retrieves):
        super().__init__(ctx.network, bundles, coder, self._open_small, report_bad,
                         count_retrieves)
        self.ctx = ctx

    def _open_small(self, content, ciphertext):
        try:
            return open_small(self.ctx.secret, content, bytes(ciphertext))
        except ContentCheckFailed:
            return None
