"""`flud restore --dry-run`: what a restore would do under DEST, with the
same PATHs, selection, --overwrite and --delete, and nothing fetched,
written, made or deleted.

DryRun stands in for run.Restore under tree.TreeRestore (the same calls:
open, restore_batch, finish, close, and what the walk reports), so the walk
and the selection are the restore's own. Each file is looked at in place
the way its --overwrite mode would (restore/in_place.py, read only: under
if-changed a file is read and hashed, a large one segment by segment) and
counted: new, replaced, beside (never's NAME.flud-restored), unchanged,
resumed from a killed run's temp. `fetch_bytes` is what would be fetched
(the plaintext of the files and segments not found in place; the shares
carry about that). --delete lists what it would delete.
"""
import os

from twisted.internet import defer

from flud.client.records import DIRECTORY, LARGE, SYMLINK, content_from_wire, content_kind
from flud.client.restore.destdir import SafeDest, UnsafePath
from flud.client.restore.file_writer import RestoreError
from flud.client.restore.in_place import (IN_FINAL, KEEP, LANDED, SegmentCheck, chunk_averages,
                                         chunked_match, look_small, newer_in_place)
from flud.client.restore.overwrite import IF_CHANGED, IF_NEWER, NEVER, Overwrite, resume_temp

LOOK_CHUNK = 64


class DryRun:
    dry_run = True   # TreeRestore: metadata is looked at, never set

    def __init__(self, ctx, overwrite=NEVER):
        """ctx: the job's JobContext (its pool reads the files in place)."""
        self.ctx = ctx
        self.overwrite = Overwrite(overwrite)
        self.dry = True
        self.summary = {"files": 0, "bytes": 0, "dirs": 0, "symlinks": 0, "new": 0,
                        "replaced": 0, "beside": 0, "unchanged": 0, "resumed": 0,
                        "fetch_bytes": 0, "deleted": 0, "failed": 0, "refused": 0,
                        "unmatched": 0}
        self.failed, self.refused, self.unmatched, self.deleted_paths = [], [], [], []
        self.dest = None
        self._missing = False   # DEST is not there: everything would be new

    def asked_for(self, wanted) -> None:
        if wanted.nothing_matched():
            raise RestoreError("nothing in the snapshot matches " + wanted.describe())
        self.unmatched = wanted.unmatched()
        self.summary["unmatched"] = len(self.unmatched)

    def open(self, dest, total_files, total_bytes) -> None:
        try:
            self.dest = SafeDest(dest, read_only=True)
        except FileNotFoundError:
            self._missing = True
        except OSError as err:
            raise RestoreError(f"cannot look into {dest}: {err.strerror or err}") from None

    def close(self) -> None:
        if self.dest is not None:
            self.dest.close()

    def maybe_dir(self, rel, mode, mtime_ns) -> None:
        pass

    def deleted(self, outcome) -> None:
        deleted, failed = outcome
        self.summary["deleted"] += len(deleted)
        self.deleted_paths.extend(deleted)
        for path, why in failed:
            self.failed.append((path, why))

    def finish(self):
        return defer.succeed(None)

    @defer.inlineCallbacks
    def restore_batch(self, entries, contents):
        files = []
        for entry in entries:
            if entry.kind == DIRECTORY:
                self.summary["dirs"] += 1
            elif entry.kind == SYMLINK:
                self.summary["symlinks"] += 1
            else:
                files.append(entry)
        for start in range(0, len(files), LOOK_CHUNK):
            chunk = files[start:start + LOOK_CHUNK]
            outcomes = yield self.ctx.pool.run(self._look, chunk, contents)
            for entry, (what, fetch) in zip(chunk, outcomes):
                if what == "refused":
                    self.summary["refused"] += 1
                    self.refused.append((entry.rel, fetch))
                    continue
                self.summary[what] += 1
                self.summary["fetch_bytes"] += fetch
                if what not in ("unchanged",):
                    self.summary["files"] += 1
                    self.summary["bytes"] += entry.size

    # --- on a pool thread

    def _look(self, chunk, contents) -> list:
        out = []
        for entry in chunk:
            try:
                out.append(self._one(entry, contents[entry.last]))
            except UnsafePath as err:
                out.append(("refused", err.why))
            except OSError:
                out.append(("new", entry.size))
        return out

    def _one(self, entry, content) -> tuple:
        """(what would happen, bytes it would fetch)."""
        place = None if self._missing else self.dest.existing_place(entry.rel)
        if place is None:
            return "new", entry.size
        with place:
            there = place.exists()
            mode = self.overwrite.mode
            if mode == IF_NEWER and newer_in_place(place, entry):
                return "unchanged", 0
            if mode == IF_CHANGED:
                if content_kind(content) == LARGE:
                    return self._large(place, entry, content, there)
                look = look_small(place, entry, content, self.ctx.secret,
                                  resume_temp(place.name, entry.last), False, dry=True)
                if look.action == KEEP:
                    return "unchanged", 0
                if look.action == LANDED:
                    return "resumed", 0
            if not there:
                return "new", entry.size
            return ("beside" if mode == NEVER else "replaced"), entry.size

    def _large(self, place, entry, content, there) -> tuple:
        large = content_from_wire(content)
        if large.chunked_id is not None:   # cut into chunks: checked whole first (in_place.py)
            averages = chunk_averages(self.ctx.home.config)
            if chunked_match(place, None, entry, large.chunked_id, self.ctx.secret, averages,
                             dry=True):
                return "unchanged", 0
            if chunked_match(place, resume_temp(place.name, entry.last), entry,
                             large.chunked_id, self.ctx.secret, averages, dry=True):
                return ("replaced" if there else "resumed"), 0
        # whole segments checked by their keys; a range of one is fetched
        pieces = [(record, length, start == 0 and length == record.length)
                  for record, start, length in large.pieces()]
        final = place.open_file()
        temp = place.open_file(resume_temp(place.name, entry.last))
        buffer = bytearray(max((r.length for r, _, whole in pieces if whole), default=1))
        try:
            check = SegmentCheck(self.ctx.secret, final[0] if final else None,
                                 temp[0] if temp else None, buffer)
            where, offset = [], 0
            for record, length, whole in pieces:
                where.append(check.where(offset, length, record.key) if whole else None)
                offset += length
        finally:
            for opened in (final, temp):
                if opened is not None:
                    os.close(opened[0])
        if final is not None and final[1].st_size == entry.size and \
                all(w == IN_FINAL for w in where):
            return "unchanged", 0
        fetch = sum(length for (_, length, _), w in zip(pieces, where) if w is None)
        if there:
            return "replaced", fetch
        return ("resumed" if fetch < entry.size else "new"), fetch
