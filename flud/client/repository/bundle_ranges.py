"""Reading a bundle's byte ranges: one small file's stored bytes, or one
sealed record's (a blob), from the shares of the bundle that holds it.

Exactly its range from the primary share of its bundle (one ranged
RETRIEVE), and if that primary is missing or corrupt, the same range from k
other shares and a zfec decode of just that range (`recover`). What comes
back is checked by the caller's opener (a small file against its
convergent key, a record against its address) before it is handed back; a
share whose part was wrong is reported. A restore's small files
(restore/small_fetch.py), the repository's records (repository/reader.py)
and prune's repacking (prune/repack.py) all read through it.
"""
from twisted.internet import defer

from flud.client.records import Bundle
from flud.coding import locate
from flud.errors import FetchFailed


class BundleRangeReader:
    """network: an INetwork. bundles: bundle records as written, a mapping
    (each made into a Bundle once, when a range first needs it). coder: a
    SegmentCoder of the bundles' k, n. opener(content, stored bytes): what
    the range holds once checked (decrypted, or as it is), or None if the
    bytes are not what the record says (safe on any thread).
    report_bad(node hex, key hex, why): a share that failed;
    count_retrieves(n): RETRIEVEs made (both called on the reactor)."""

    def __init__(self, network, bundles, coder, opener, report_bad=lambda node, key, why: None,
                 count_retrieves=lambda n: None):
        self.network = network
        self._opener = opener
        self._wire_bundles = bundles
        self._bundles = {}  # bundle id -> Bundle
        self._coder = coder
        self._report_bad = report_bad
        self._count_retrieves = count_retrieves

    def bundle(self, bundle_id):
        """The bundle's record, made once for all the files in it."""
        bundle = self._bundles.get(bundle_id)
        if bundle is None:
            bundle = self._bundles[bundle_id] = Bundle.from_wire(self._wire_bundles[bundle_id])
        return bundle

    def open(self, content, stored):
        """What a range's stored bytes hold, checked (the opener's answer:
        None if they are not what the record says); safe on any thread."""
        return self._opener(content, stored)

    def retrieve_run(self, run):
        """Deferred: the bytes of a run (runs.Run) from its block's holder,
        or its failure (reported as the share's, once)."""
        holder = run.holder
        d = self.network.retrieve(bytes.fromhex(holder.node), bytes.fromhex(holder.key),
                                  run.start, run.end - run.start)

        def got(data):
            self._count_retrieves(1)
            return data

        def failed(failure):
            self._report_bad(holder.node, holder.key, failure.getErrorMessage())
            return failure

        return d.addCallbacks(got, failed)

    def recover(self, content, fetched=()):
        """Deferred: the plaintext of a file whose run failed, or whose parts
        from its runs (fetched: [(block, bytes)], those that came) are
        missing or failed their check: its range rebuilt from other shares,
        and each part that was wrong reported."""
        bundle = self.bundle(content.bundle)
        pieces = locate(content.offset, content.length, bundle.block_length)
        return self._rebuild_checked(bundle, pieces, content, list(fetched))

    @defer.inlineCallbacks
    def fetch(self, content):
        """The plaintext of a SmallContent."""
        bundle = self.bundle(content.bundle)
        pieces = locate(content.offset, content.length, bundle.block_length)
        holders = {h.index: h for h in bundle.holders}
        parts = []
        for block, start, end in pieces:
            part = None
            holder = holders.get(block)
            if holder is not None:
                try:
                    part = yield self.network.retrieve(bytes.fromhex(holder.node),
                                                       bytes.fromhex(holder.key), start, end - start)
                    self._count_retrieves(1)
                except Exception as err:
                    self._report_bad(holder.node, holder.key, str(err))
            parts.append((block, start, end, part))
        fetched = [(block, part) for block, _, _, part in parts if part is not None]
        if len(fetched) == len(parts):
            plain = self.open(content, b"".join(part for _, part in fetched))
            if plain is not None:
                return plain
        plain = yield self._rebuild_checked(bundle, pieces, content, fetched)
        return plain

    @defer.inlineCallbacks
    def _rebuild_checked(self, bundle, pieces, content, fetched):
        """The plaintext rebuilt from other shares; each part of `fetched`
        ([(block, bytes)]) that differs from its rebuilt range reported."""
        # Which part is wrong, the check cannot say (a file spanning two
        # blocks has two holders): the rebuild from other shares can.
        suspects = {block for block, _ in fetched}
        plain, rebuilt = yield self._rebuild_small(bundle, pieces, content, avoid=suspects)
        holders = {h.index: h for h in bundle.holders}
        for block, part in fetched:
            if bytes(part) != rebuilt[block]:
                holder = holders[block]
                self._report_bad(holder.node, holder.key, "corrupt (content check failed)")
        return plain

    @defer.inlineCallbacks
    def _rebuild_small(self, bundle, pieces, content, avoid=()):
        """The same ranges from any k shares, decoded (zfec works byte-wise),
        the shares in `avoid` last: (plaintext, {block: its range's bytes})."""
        k = bundle.k
        first = min(s for _, s, _ in pieces) if len(pieces) == 1 else 0
        last = max(e for _, _, e in pieces) if len(pieces) == 1 else bundle.block_length
        got = {}
        order = sorted(bundle.holders, key=lambda h: (h.index in avoid, -h.index))
        for index, key_hex, node_hex in order:
            if len(got) == k:
                break
            try:
                got[index] = yield self.network.retrieve(bytes.fromhex(node_hex),
                                                         bytes.fromhex(key_hex), first, last - first)
                self._count_retrieves(1)
            except Exception as err:
                self._report_bad(node_hex, key_hex, str(err))
        if len(got) < k:
            raise FetchFailed(f"only {len(got)} of {k} shares of a bundle are reachable")
        blocks = self._coder.decode_blocks_range(got)
        rebuilt = {b: bytes(blocks[b][s - first:e - first]) for b, s, e in pieces}
        plain = self.open(content, b"".join(rebuilt[b] for b, _, _ in pieces))
        if plain is None:
            raise FetchFailed("a small file rebuilt from other shares is still wrong: "
                              "more shares are corrupt than the code can repair")
        return plain, rebuilt
