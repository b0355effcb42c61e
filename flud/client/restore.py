"""`flud restore`: bring a snapshot (or part of it) back under DEST.

Large files: segment by segment (fetch_segment), written to a temp file that
is fsynced and renamed into place. Small files: exactly their byte range from
the primary share of their bundle, many requests pipelined per node; if the
primary is missing or corrupt, the same range from k other shares and a zfec
decode of just that range. Every file is checked against its convergent key
before it is written, so a corrupt share never reaches a file.

Every path under DEST goes through client/destdir.py: directories opened one
name at a time, never through a symlink. An entry whose path would pass
through one (or is not a plain relative path) is refused, reported and
skipped; the rest is restored.
"""
import logging
import os

from twisted.internet import defer

from flud.client.blocks import BlockRestore
from flud.client.destdir import SafeDest, UnsafePath
from flud.client.directio import PositionalWriter
from flud.client.gather import settle_all
from flud.client.records import (DIR, EMPTY, LARGE, SMALL, SYMLINK, Bundle, content_from_wire,
                                 content_kind, entries_from_wire)
from flud.client.segments import FetchFailed
from flud.coding import SegmentCoder, locate
from flud.crypto import content_digest, convergent_key, decrypt_ctr

log = logging.getLogger("flud.client")

SMALL_IN_FLIGHT = 256       # small-file fetches outstanding at once
LARGE_IN_FLIGHT = 3         # large files restored at once, each in its window
# What one file's restore may hold: its window of block buffers (blocks.py),
# the k primary blocks of two 2 MiB segments at the defaults (the plaintext
# is decrypted into them).
FILE_FOOTPRINT = 4 * 1024 * 1024
BESIDE_SUFFIX = ".flud-restored"
TEMP_SUFFIX = ".flud-part"
TEMP_TRIES = 100  # names tried for a temp file (one left by an interrupted run is kept)


class RestoreError(Exception):
    pass


def select(entries, paths) -> list:
    if not paths:
        return entries
    wanted = [os.path.normpath(p).strip("/") for p in paths]
    return [e for e in entries
            if any(e.rel == w or e.rel.startswith(w + "/") or w.startswith(e.rel + "/")
                   and e.kind == DIR for w in wanted)]


class Restore:
    def __init__(self, reactor, home, network, pool, monitor, progress, manifest):
        self.reactor = reactor
        self.home = home
        self.network = network
        self.pool = pool
        self.monitor = monitor
        self.progress = progress
        self.manifest = manifest
        k, n = manifest["k"], manifest["n"]
        self.segment_coder = SegmentCoder(k, n)
        self.bundle_coder = SegmentCoder(k, n)
        self.summary = {"files": 0, "bytes": 0, "dirs": 0, "symlinks": 0, "beside": 0,
                        "failed": 0, "refused": 0, "bad_shares": 0, "retrieves": 0}
        self.bad_shares = []
        self.unreachable = {}  # node hex -> shares of it fetched elsewhere
        self._reported = set()
        self.failed = []
        self.refused = []  # [(path in the snapshot, why)]
        self._refused = set()
        self.dest = None  # a SafeDest while run() runs
        self._temps = 0
        self._bundles = {}  # bundle id -> Bundle, made when first needed
        self._slots = defer.DeferredSemaphore(SMALL_IN_FLIGHT)
        self._large_slots = defer.DeferredSemaphore(LARGE_IN_FLIGHT)

    def report_bad(self, node_hex, key_hex, why):
        if (node_hex, key_hex) in self._reported:
            return  # one warning per share, however many files it serves
        self._reported.add((node_hex, key_hex))
        health = getattr(self.network, "health", None)
        if health is not None and bytes.fromhex(node_hex) in health.failed:
            # Down or stalled, not corrupt: said once for the node.
            counted = self.unreachable.get(node_hex, 0)
            self.unreachable[node_hex] = counted + 1
            if not counted:
                reason = health.why.get(bytes.fromhex(node_hex), why)
                self.progress.warn(f"node {node_hex[:12]} is unreachable ({reason}); "
                                   f"its shares come from other holders")
            return
        self.summary["bad_shares"] += 1
        self.bad_shares.append((node_hex, key_hex, why))
        self.progress.warn(f"share {key_hex[:16]} on node {node_hex[:12]}: {why}; using others")

    def refuse(self, rel, why):
        """Skip an entry whose path is not safe to write; said once per entry."""
        if rel in self._refused:
            return
        self._refused.add(rel)
        self.summary["refused"] += 1
        self.refused.append((rel, why))
        self.progress.warn(f"refused {rel}: {why}")

    def _safe(self, rel, fn, *args):
        """fn(*args); False (and the entry refused) if its path is not safe."""
        if rel in self._refused:
            return False
        try:
            fn(*args)
        except UnsafePath as err:
            self.refuse(rel, err.why)
            return False
        return True

    @defer.inlineCallbacks
    def run(self, dest, paths=()):
        entries = select(entries_from_wire(self.manifest["entries"]), paths)
        if not entries:
            raise RestoreError("nothing in the snapshot matches " + ", ".join(paths))
        try:
            self.dest = SafeDest(dest)
        except OSError as err:
            raise RestoreError(f"cannot restore into {dest}: {err.strerror or err}") from None
        try:
            yield self._run(entries)
        finally:
            self.dest.close()
        return self.summary

    @defer.inlineCallbacks
    def _run(self, entries):
        files = [e for e in entries if e.is_file]
        self.progress.start(len(files), sum(e.size for e in files))
        for entry in entries:
            if entry.kind == DIR and self._safe(entry.rel, self.dest.make_dir, entry.rel):
                self.summary["dirs"] += 1
        # Refused before anything is fetched for them (a file is checked
        # again where it is written).
        files = [e for e in files if self._safe(e.rel, self.dest.check, e.rel)]
        contents = self.manifest["contents"]
        small = [e for e in files if content_kind(contents[e.last]) == SMALL]
        work = [self._slots.run(self._small, e) for e in small]
        for entry in files:
            kind = content_kind(contents[entry.last])
            if kind == EMPTY:
                self._write_or_fail(entry, b"")
            elif kind == LARGE:
                work.append(self._large_slots.run(self._guarded, self._large, entry))
        yield settle_all(work)
        for entry in entries:
            if entry.kind == SYMLINK:
                try:
                    self._safe(entry.rel, self._symlink, entry.rel, entry.last, entry.mtime_ns)
                except (RestoreError, OSError) as err:
                    self._failed(entry.rel, err)
        for entry in sorted(entries, reverse=True):
            if entry.kind == DIR:  # after their contents: writing into them moved mtime
                try:
                    self._safe(entry.rel, self.dest.set_dir_meta, entry.rel, entry.mode,
                               entry.mtime_ns)
                except OSError as err:  # gone meanwhile, say: the rest still gets its times
                    self._failed(entry.rel, err)
        self.progress.finish()

    @defer.inlineCallbacks
    def _guarded(self, fn, entry):
        try:
            yield fn(entry)
        except UnsafePath as err:
            self.refuse(entry.rel, err.why)
        except (FetchFailed, RestoreError, OSError) as err:
            self._failed(entry.rel, err)

    @defer.inlineCallbacks
    def _large(self, entry):
        """Block by block into a temp file (flud/client/blocks.py), a window
        of FILE_FOOTPRINT ahead; fsynced, then renamed into place."""
        content = content_from_wire(self.manifest["contents"][entry.last])
        transfer = self.monitor.transfer("download", entry.rel)
        place = self.dest.place(entry.rel)
        try:
            final = self._final_name(place)
            temp, out = self._new_temp(place, lambda name: PositionalWriter(
                name, dir_fd=place.dir_fd))
            try:
                with out:
                    yield BlockRestore(self, content, out, transfer, FILE_FOOTPRINT).run()
                    _set_meta(out.fd, entry)
                self._finish(place, temp, final, entry)
            except BaseException:
                place.unlink(temp)
                raise
        finally:
            place.close()
            transfer.close()

    @defer.inlineCallbacks
    def _small(self, entry):
        content = content_from_wire(self.manifest["contents"][entry.last])
        try:
            data = yield self._fetch_small(content)
        except (FetchFailed, RestoreError) as err:
            self._failed(entry.rel, err)
            return
        if self._write_or_fail(entry, data):
            self.progress.bytes_done(len(data))

    def _write_or_fail(self, entry, data) -> bool:
        """Write a small file; a refused or failed one is counted, not raised."""
        try:
            return self._safe(entry.rel, self._write, entry, [data])
        except (RestoreError, OSError) as err:
            self._failed(entry.rel, err)
            return False

    def _failed(self, rel, err):
        self.summary["failed"] += 1
        self.failed.append((rel, str(err)))
        self.progress.warn(f"could not restore {rel}: {err}")

    def _bundle(self, bundle_id):
        """The bundle's record, made once for all the files in it."""
        bundle = self._bundles.get(bundle_id)
        if bundle is None:
            bundle = self._bundles[bundle_id] = Bundle.from_wire(
                self.manifest["bundles"][bundle_id])
        return bundle

    @defer.inlineCallbacks
    def _fetch_small(self, content):
        bundle = self._bundle(content.bundle)
        key = bytes.fromhex(content.key)
        pieces = locate(content.offset, content.length, bundle.block_length)
        holders = {h.index: h for h in bundle.holders}
        parts = []
        for block, start, end in pieces:
            part = None
            holder = holders.get(block)
            if holder is not None:
                try:
                    part = yield self.network.call(bytes.fromhex(holder.node), "retrieve",
                                                   bytes.fromhex(holder.key), start, end - start)
                    self.summary["retrieves"] += 1
                except Exception as err:
                    self.report_bad(holder.node, holder.key, str(err))
            parts.append((block, start, end, part))
        fetched = [(block, part) for block, _, _, part in parts if part is not None]
        if len(fetched) == len(parts):
            plain = decrypt_ctr(key, b"".join(part for _, part in fetched))
            if convergent_key(self.home.secret, content_digest(plain)) == key:
                return plain
        # Which part is wrong, the check cannot say (a file spanning two
        # blocks has two holders): the rebuild from other shares can.
        suspects = {block for block, _ in fetched}
        plain, rebuilt = yield self._rebuild_small(bundle, pieces, key, avoid=suspects)
        for block, part in fetched:
            if bytes(part) != rebuilt[block]:
                holder = holders[block]
                self.report_bad(holder.node, holder.key, "corrupt (content check failed)")
        return plain

    @defer.inlineCallbacks
    def _rebuild_small(self, bundle, pieces, key, avoid=()):
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
                got[index] = yield self.network.call(bytes.fromhex(node_hex), "retrieve",
                                                     bytes.fromhex(key_hex), first, last - first)
                self.summary["retrieves"] += 1
            except Exception as err:
                self.report_bad(node_hex, key_hex, str(err))
        if len(got) < k:
            raise FetchFailed(f"only {len(got)} of {k} shares of a bundle are reachable")
        blocks = self.bundle_coder.decode_blocks_range(got)
        rebuilt = {b: bytes(blocks[b][s - first:e - first]) for b, s, e in pieces}
        plain = decrypt_ctr(key, b"".join(rebuilt[b] for b, _, _ in pieces))
        if convergent_key(self.home.secret, content_digest(plain)) != key:
            raise FetchFailed("a small file rebuilt from other shares is still wrong: "
                              "more shares are corrupt than the code can repair")
        return plain, rebuilt

    def _final_name(self, place):
        """The entry's own name, or NAME.flud-restored beside what is there:
        a restore never overwrites, and never writes through a symlink."""
        if not place.exists():
            return place.name
        self.summary["beside"] += 1
        name = place.name + BESIDE_SUFFIX
        if place.exists(name):
            raise RestoreError(f"{place.rel}{BESIDE_SUFFIX} exists too; "
                               f"restore into an empty directory")
        return name

    def _new_temp(self, place, opener):
        """(name, opener(name)) of a new temp file beside the entry: a name
        no file has (one an interrupted run left is kept, not reused)."""
        for _ in range(TEMP_TRIES):
            self._temps += 1
            name = f".{self._temps}{TEMP_SUFFIX}"
            try:
                return name, opener(name)
            except FileExistsError:
                continue
        raise RestoreError(f"no free temp name beside {place.rel}: remove the "
                           f"*{TEMP_SUFFIX} files an interrupted restore left there")

    def _write(self, entry, chunks):
        with self.dest.place(entry.rel) as place:
            final = self._final_name(place)
            temp, fd = self._new_temp(place, lambda name: place.open_new(name, 0o600))
            try:
                with open(fd, "wb", closefd=True) as out:
                    for chunk in chunks:
                        out.write(chunk)
                    out.flush()
                    _set_meta(out.fileno(), entry)
                self._finish(place, temp, final, entry)
            except BaseException:
                place.unlink(temp)
                raise

    def _finish(self, place, temp, final, entry):
        place.rename(temp, final)
        self.summary["files"] += 1
        self.summary["bytes"] += entry.size
        self.progress.file_done(0)

    def _symlink(self, rel, target, mtime_ns):
        with self.dest.place(rel) as place:
            name = self._final_name(place)
            place.symlink(target, name)
            place.set_link_times(name, mtime_ns)
        self.summary["symlinks"] += 1


def _set_meta(fd, entry):
    """Mode and times through the file's own descriptor (never a path)."""
    os.fchmod(fd, entry.mode)
    os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
