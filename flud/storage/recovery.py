"""What ShareStore does at open to get back to a consistent state after a crash.

Commit returns only after data fsync + index commit, so anything on disk that
the index does not describe was never acknowledged and can go:

1. incoming/ is emptied (uploads in flight when we stopped).
2. Compactions: one the index recorded (new offsets committed) is finished by
   renaming its .compact file into place if that has not happened yet; a
   .compact file without a record is a compaction that never committed and
   is deleted, leaving the old archive and old offsets.
3. Archive files with no index row (a first append that never committed) go.
4. Every archive is cut back to its committed length (a torn append).
5. Share files whose last owner left but that were not yet unlinked go.
"""

from __future__ import annotations

import logging
import os

from flud.storage.archives import ArchiveFiles
from flud.storage.index import Index
from flud.storage.layout import COMPACT_SUFFIX, Layout

log = logging.getLogger(__name__)


def recover(layout: Layout, index: Index, files: ArchiveFiles) -> None:
    _empty_incoming(layout)
    archives = {row.owner: row for row in index.all_archives()}
    _settle_compactions(layout, index, files, archives)
    _remove_stray_archive_files(layout, archives)
    for row in archives.values():
        files.trim_to(row.owner, row.committed_length)
    _finish_unlinks(layout, index)


def _empty_incoming(layout: Layout) -> None:
    for name in os.listdir(layout.incoming):
        os.unlink(os.path.join(layout.incoming, name))


def _settle_compactions(layout: Layout, index: Index, files: ArchiveFiles, archives: dict) -> None:
    recorded = set(index.pending_compactions())
    for row in archives.values():
        compact = layout.compact_path(row.owner)
        if row.id not in recorded:
            if os.path.exists(compact):
                log.warning("discarding an unfinished compaction of %s", layout.archive_path(row.owner))
                files.discard_compacted(row.owner)
            continue
        if os.path.exists(compact):  # committed, not yet renamed
            log.warning("finishing an interrupted compaction of %s", layout.archive_path(row.owner))
            files.swap(row.owner)
            files.sync_directory()
        with index.transaction():
            index.clear_compaction(row.id)


def _remove_stray_archive_files(layout: Layout, archives: dict) -> None:
    for name in os.listdir(layout.archives):
        owner = layout.owner_of_archive_file(name)
        if owner is None:
            log.warning("ignoring %s in %s: not a file the store made", name, layout.archives)
            continue
        if owner in archives and not name.endswith(COMPACT_SUFFIX):
            continue
        log.warning("removing %s: no committed archive in the index", name)
        os.unlink(os.path.join(layout.archives, name))


def _finish_unlinks(layout: Layout, index: Index) -> None:
    pending = index.pending_unlinks()
    for key in pending:
        if index.share_length(key) is None:  # not stored again since
            try:
                os.unlink(layout.share_path(key))
            except FileNotFoundError:
                pass
    if pending:
        with index.transaction():
            index.forget_unlinks(pending)
