"""A restore's small files, fetched from their bundles' shares.

Most come by runs (runs.py): one ranged RETRIEVE of a primary share block
carries many files, and each is opened (decrypted and checked, `open`) on
a writer thread. A file that does not (its run failed, it failed its
check, or its block has no holder) comes here alone:
exactly its byte range from the primary share of its bundle, and if that
primary is missing or corrupt, the same range from k other shares and a
zfec decode of just that range (`recover`). Every file is opened (decrypted,
decompressed if its record says so) and checked against its convergent key
before it is handed back."""
from twisted.internet import defer

from flud.client.repository.small_contents import ContentCheckFailed, open_small
from flud.client.records import Bundle
from flud.client.repository.segments import FetchFailed
from flud.coding import locate


class SmallFetch:
    """bundles: the manifest's bundle records as written (each made into a
    Bundle once, when a file first needs it). coder: a SegmentCoder of the
    bundles' k, n. report_bad(node hex, key hex, why): a share that failed;
    count_retrieves(n): RETRIEVEs made (both called on the reactor)."""

    def __init__(self, ctx, bundles, coder, report_bad, count_retrieves):
        self.ctx = ctx
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

    def open(self, content, ciphertext):
        """The plaintext of a small file's stored bytes (decrypted,
        decompressed if its record says so), or None if they are not the
        file the manifest recorded (its convergent key says); safe on any
        thread. The one place a small file is opened. UnknownCompression
        (the record names a method this flud lacks) fails the file alone."""
        try:
            return open_small(self.ctx.secret, content, bytes(ciphertext))
        except ContentCheckFailed:
            return None

    def retrieve_run(self, run):
        """Deferred: the bytes of a run (runs.Run) from its block's holder,
        or its failure (reported as the share's, once)."""
        holder = run.holder
        d = self.ctx.network.call(bytes.fromhex(holder.node), "retrieve",
                                  bytes.fromhex(holder.key), run.start, run.end - run.start)

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
                    part = yield self.ctx.network.call(bytes.fromhex(holder.node), "retrieve",
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
                got[index] = yield self.ctx.network.call(bytes.fromhex(node_hex), "retrieve",
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
