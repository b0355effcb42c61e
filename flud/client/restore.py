"""`flud restore`: bring a snapshot (or part of it) back under DEST.

Large files: segment by segment (fetch_segment), written to a temp file that
is fsynced and renamed into place. Small files: exactly their byte range from
the primary share of their bundle, many requests pipelined per node; if the
primary is missing or corrupt, the same range from k other shares and a zfec
decode of just that range. Every file is checked against its convergent key
before it is written, so a corrupt share never reaches a file.
"""
import logging
import os

from twisted.internet import defer

from flud.client.blocks import BlockRestore
from flud.client.directio import PositionalWriter
from flud.client.gather import settle_all
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


class RestoreError(Exception):
    pass


def select(entries, paths) -> list:
    if not paths:
        return entries
    wanted = [os.path.normpath(p).strip("/") for p in paths]
    return [e for e in entries
            if any(e[0] == w or e[0].startswith(w + "/") or w.startswith(e[0] + "/")
                   and e[1] == "dir" for w in wanted)]


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
                        "failed": 0, "bad_shares": 0, "retrieves": 0}
        self.bad_shares = []
        self._reported = set()
        self.failed = []
        self._slots = defer.DeferredSemaphore(SMALL_IN_FLIGHT)
        self._large_slots = defer.DeferredSemaphore(LARGE_IN_FLIGHT)

    def report_bad(self, node_hex, key_hex, why):
        if (node_hex, key_hex) in self._reported:
            return  # one warning per share, however many files it serves
        self._reported.add((node_hex, key_hex))
        self.summary["bad_shares"] += 1
        self.bad_shares.append((node_hex, key_hex, why))
        self.progress.warn(f"share {key_hex[:16]} on node {node_hex[:12]}: {why}; using others")

    @defer.inlineCallbacks
    def run(self, dest, paths=()):
        dest = os.path.abspath(dest)
        entries = select(self.manifest["entries"], paths)
        if not entries:
            raise RestoreError("nothing in the snapshot matches " + ", ".join(paths))
        files = [e for e in entries if e[1] == "file"]
        self.progress.start(len(files), sum(e[4] for e in files))
        os.makedirs(dest, exist_ok=True)
        for rel, kind, mode, mtime_ns, size, last in entries:
            if kind == "dir":
                os.makedirs(self._target(dest, rel), exist_ok=True)
                self.summary["dirs"] += 1
        contents = self.manifest["contents"]
        small = [e for e in files if contents[e[5]]["t"] == "S"]
        work = [self._slots.run(self._small, dest, e) for e in small]
        for entry in files:
            record = contents[entry[5]]
            if record["t"] == "E":
                self._write(dest, entry, [b""])
            elif record["t"] == "L":
                work.append(self._large_slots.run(self._guarded, self._large, dest, entry))
        yield settle_all(work)
        for rel, kind, mode, mtime_ns, size, target in entries:
            if kind == "symlink":
                self._symlink(dest, rel, target, mtime_ns)
        for rel, kind, mode, mtime_ns, size, last in sorted(entries, reverse=True):
            if kind == "dir":  # after their contents: writing into them moved mtime
                path = self._target(dest, rel)
                os.chmod(path, mode)
                os.utime(path, ns=(mtime_ns, mtime_ns))
        self.progress.finish()
        return self.summary

    def _target(self, dest, rel) -> str:
        path = os.path.normpath(os.path.join(dest, rel))
        if path != dest and not path.startswith(dest + os.sep):
            raise RestoreError(f"refusing a path outside {dest}: {rel}")
        return path

    @defer.inlineCallbacks
    def _guarded(self, fn, dest, entry):
        try:
            yield fn(dest, entry)
        except (FetchFailed, RestoreError, OSError) as err:
            self.summary["failed"] += 1
            self.failed.append((entry[0], str(err)))
            self.progress.warn(f"could not restore {entry[0]}: {err}")

    @defer.inlineCallbacks
    def _large(self, dest, entry):
        """Block by block into a temp file (flud/client/blocks.py), a window
        of FILE_FOOTPRINT ahead; fsynced, then renamed into place."""
        record = self.manifest["contents"][entry[5]]
        transfer = self.monitor.transfer("download", entry[0])
        path, temp = self._paths(dest, entry)
        try:
            with PositionalWriter(temp) as out:
                yield BlockRestore(self, record, out, transfer, FILE_FOOTPRINT).run()
            self._finish(path, temp, entry)
        except BaseException:
            _unlink(temp)
            raise
        finally:
            transfer.close()

    @defer.inlineCallbacks
    def _small(self, dest, entry):
        record = self.manifest["contents"][entry[5]]
        try:
            data = yield self._fetch_small(record)
        except (FetchFailed, RestoreError) as err:
            self.summary["failed"] += 1
            self.failed.append((entry[0], str(err)))
            self.progress.warn(f"could not restore {entry[0]}: {err}")
            return
        self._write(dest, entry, [data])
        self.progress.bytes_done(len(data))

    @defer.inlineCallbacks
    def _fetch_small(self, record):
        bundle = self.manifest["bundles"][record["b"]]
        key = bytes.fromhex(record["key"])
        pieces = locate(record["o"], record["l"], bundle["bl"])
        holders = {s[0]: s for s in bundle["shares"]}
        parts = []
        for block, start, end in pieces:
            part = None
            holder = holders.get(block)
            if holder is not None:
                try:
                    part = yield self.network.call(bytes.fromhex(holder[2]), "retrieve",
                                                   bytes.fromhex(holder[1]), start, end - start)
                    self.summary["retrieves"] += 1
                except Exception as err:
                    self.report_bad(holder[2], holder[1], str(err))
            parts.append((block, start, end, part))
        cipher = b"".join(p for _, _, _, p in parts if p is not None)
        if all(p is not None for *_, p in parts):
            plain = decrypt_ctr(key, cipher)
            if convergent_key(self.home.secret, content_digest(plain)) == key:
                return plain
            for block, *_ in parts:
                holder = holders[block]
                self.report_bad(holder[2], holder[1], "corrupt (content check failed)")
        plain = yield self._rebuild_small(record, bundle, pieces, key)
        return plain

    @defer.inlineCallbacks
    def _rebuild_small(self, record, bundle, pieces, key):
        """The same ranges from any k shares, decoded (zfec works byte-wise)."""
        k = bundle["k"]
        first = min(s for _, s, _ in pieces) if len(pieces) == 1 else 0
        last = max(e for _, _, e in pieces) if len(pieces) == 1 else bundle["bl"]
        got = {}
        for index, key_hex, node_hex in sorted(bundle["shares"], key=lambda s: -s[0]):
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
        cipher = b"".join(blocks[b][s - first:e - first] for b, s, e in pieces)
        plain = decrypt_ctr(key, cipher)
        if convergent_key(self.home.secret, content_digest(plain)) != key:
            raise FetchFailed("a small file rebuilt from other shares is still wrong: "
                              "more shares are corrupt than the code can repair")
        return plain

    def _paths(self, dest, entry):
        path = self._target(dest, entry[0])
        if os.path.lexists(path):
            path = path + BESIDE_SUFFIX
            self.summary["beside"] += 1
            if os.path.lexists(path):
                raise RestoreError(f"{path} exists too; restore into an empty directory")
        return path, path + ".part"

    def _write(self, dest, entry, chunks):
        path, temp = self._paths(dest, entry)
        try:
            with open(temp, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            self._finish(path, temp, entry)
        except BaseException:
            _unlink(temp)
            raise

    def _finish(self, path, temp, entry):
        rel, kind, mode, mtime_ns, size, _ = entry
        os.chmod(temp, mode)
        os.utime(temp, ns=(mtime_ns, mtime_ns))
        os.rename(temp, path)
        self.summary["files"] += 1
        self.summary["bytes"] += size
        self.progress.file_done(0)

    def _symlink(self, dest, rel, target, mtime_ns):
        path = self._target(dest, rel)
        if os.path.lexists(path):
            path += BESIDE_SUFFIX
            self.summary["beside"] += 1
        os.symlink(target, path)
        os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
        self.summary["symlinks"] += 1


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
