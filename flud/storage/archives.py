"""File-level work on the per-sender archives: append, truncate, compact, swap.

An archive file is a plain tar of member blocks (header + data + padding) with
no end-of-archive zeros. The index's committed_length says how much of it is
real: bytes past it are the remains of an append that never committed, cut off
before the next append and at every open. Nothing below committed_length is
ever rewritten in place; compaction writes a new file and renames it over.

This module does files only; disk.py decides when, under which locks, and
keeps the index in step.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from flud.storage.fileio import copy_range, disk_full_as_no_space, fsync_dir
from flud.storage.index import LiveMember
from flud.storage.layout import Layout
from flud.storage.tarscan import TAR_BLOCK, member_span

log = logging.getLogger(__name__)
FILE_MODE = 0o600

# Named points of a compaction, in order; tests inject a crash at each one.
STEP_COPYING = "copying"  # part of the new file written
STEP_COPIED = "copied"  # new file complete and fsynced
STEP_INDEXED = "indexed"  # new offsets committed, rename not done
STEP_RENAMED = "renamed"  # renamed, directory not fsynced
STEP_SYNCED = "synced"  # rename durable, compaction record not cleared
COMPACTION_STEPS = (STEP_COPYING, STEP_COPIED, STEP_INDEXED, STEP_RENAMED, STEP_SYNCED)

FaultHook = Callable[[str], None]


@dataclass(frozen=True)
class Move:
    """A live member's place before and after compaction."""

    key: bytes
    old_offset: int
    new_offset: int
    span: int


class ArchiveFiles:
    def __init__(self, layout: Layout, durable: bool, fault: FaultHook) -> None:
        self._layout = layout
        self._durable = durable
        self._fault = fault

    def open_for_read(self, owner: bytes) -> int:
        return os.open(self._layout.archive_path(owner), os.O_RDONLY)

    def append(self, owner: bytes, committed: int, src_fd: int, length: int) -> None:
        """Copy src[0:length] to the archive at `committed`, durably. On failure the
        archive is cut back to `committed` and the error (NoSpace for a full disk) raised."""
        path = self._layout.archive_path(owner)
        created = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            with disk_full_as_no_space("appending to an archive"):
                try:
                    if os.fstat(fd).st_size != committed:
                        os.ftruncate(fd, committed)  # remains of an append that failed
                    copy_range(src_fd, 0, fd, committed, length)
                    if self._durable:
                        os.fsync(fd)
                except Exception:
                    _truncate_quietly(fd, committed, path)
                    raise
                if created and self._durable:
                    fsync_dir(self._layout.archives)
        finally:
            os.close(fd)

    def truncate(self, owner: bytes, committed: int) -> None:
        fd = os.open(self._layout.archive_path(owner), os.O_RDWR)
        try:
            _truncate_quietly(fd, committed, self._layout.archive_path(owner))
        finally:
            os.close(fd)

    def write_compacted(self, owner: bytes, members: list[LiveMember]) -> tuple[int, list[Move]]:
        """Write the live members' blocks, in order, to the .compact file and fsync it.
        Returns (new length, moves). On failure the .compact file is removed."""
        compact = self._layout.compact_path(owner)
        moves = []
        src = self.open_for_read(owner)
        try:
            dst = os.open(compact, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                with disk_full_as_no_space("compacting an archive"):
                    new_length = 0
                    for run in _contiguous_runs(members):
                        start = run[0].data_offset - TAR_BLOCK
                        run_length = sum(member_span(m.length) for m in run)
                        copy_range(src, start, dst, new_length, run_length)
                        for m in run:
                            moves.append(Move(m.key, m.data_offset, m.data_offset - start + new_length, member_span(m.length)))
                        new_length += run_length
                        self._fault(STEP_COPYING)
                    if self._durable:
                        os.fsync(dst)
                        # The .compact entry itself must be durable before the index
                        # commits: recovery reads "no .compact" as "already renamed".
                        fsync_dir(self._layout.archives)
            finally:
                os.close(dst)
        except Exception:
            _unlink_quietly(compact)
            raise
        finally:
            os.close(src)
        self._fault(STEP_COPIED)
        return new_length, moves

    def swap(self, owner: bytes) -> None:
        """Put the compacted file in place of the archive (atomic rename)."""
        os.replace(self._layout.compact_path(owner), self._layout.archive_path(owner))

    def sync_directory(self) -> None:
        if self._durable:
            fsync_dir(self._layout.archives)

    def remove(self, owner: bytes) -> None:
        """The archive's row is gone: its file (and any compaction's) goes too.
        A crash before this is finished by recovery (no row: the file goes)."""
        _unlink_quietly(self._layout.archive_path(owner))
        _unlink_quietly(self._layout.compact_path(owner))
        self.sync_directory()

    def discard_compacted(self, owner: bytes) -> None:
        _unlink_quietly(self._layout.compact_path(owner))

    def trim_to(self, owner: bytes, committed: int) -> None:
        """At open: cut a torn tail off; complain (but go on) if bytes are missing."""
        path = self._layout.archive_path(owner)
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            size = 0
            if committed:
                log.error("archive %s is missing; its %d indexed bytes are lost", path, committed)
            return
        if size > committed:
            log.warning("archive %s: cutting %d uncommitted bytes after a crash", path, size - committed)
            self.truncate(owner, committed)
        elif size < committed:
            log.error("archive %s is %d bytes shorter than indexed; it was truncated behind the store", path, committed - size)


def _contiguous_runs(members: list[LiveMember]) -> list[list[LiveMember]]:
    """Group members (sorted by offset) whose blocks touch, so each run is one copy."""
    runs: list[list[LiveMember]] = []
    end = None
    for member in members:
        if runs and member.data_offset - TAR_BLOCK == end:
            runs[-1].append(member)
        else:
            runs.append([member])
        end = member.data_offset - TAR_BLOCK + member_span(member.length)
    return runs


def _truncate_quietly(fd: int, length: int, path: str) -> None:
    try:
        os.ftruncate(fd, length)
        os.fsync(fd)
    except OSError as exc:  # the next append or open cuts it again
        log.warning("could not cut %s back to %d bytes: %s", path, length, exc)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
