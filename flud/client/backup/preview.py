"""`flud backup --dry-run`: what a backup would find new, changed and
unchanged, without sending anything or writing to the client index.

It walks the roots with the backup's own walk, exclude rules and listing
fingerprints, and asks the index the same read-only questions the first
walk of a backup asks (run.py, Backup._find_changes): a directory whose
listing is as the last backup saw it is unchanged as a whole; otherwise each
file is compared (size, times, inode) with its known state. So the files it
calls new or changed are the files the backup would then read and send.
Memory follows the walk (the open directories' listings), not the tree.
"""
import dataclasses
import os
from typing import Callable

from flud.client.backup.listing import listing_fingerprint
from flud.client.backup.source_excludes import ExcludeRules
from flud.client.backup.source_scan import entry_of
from flud.client.backup.source_walk import walk
from flud.client.records import DIRECTORY, FILE

NEW, CHANGED, UNCHANGED = "new", "changed", "unchanged"


@dataclasses.dataclass
class PreviewTotals:
    new: int = 0
    new_bytes: int = 0
    changed: int = 0
    changed_bytes: int = 0
    unchanged: int = 0
    unchanged_bytes: int = 0
    excluded: int = 0
    skipped: int = 0

    def add(self, status: str, size: int) -> None:
        setattr(self, status, getattr(self, status) + 1)
        setattr(self, status + "_bytes", getattr(self, status + "_bytes") + size)

    @property
    def files(self) -> int:
        return self.new + self.changed + self.unchanged

    @property
    def bytes(self) -> int:
        return self.new_bytes + self.changed_bytes + self.unchanged_bytes


class NoIndex:
    """The index of a home that has none yet (no backup ran): every file is
    new. A dry run does not create one."""

    @staticmethod
    def states_known(directory):
        return {}

    @staticmethod
    def dir_local(path):
        return None

    @staticmethod
    def get_meta(key, default=None):
        return default


def preview(index, paths, excludes=(), on_file: Callable = lambda entry, status: None,
            on_skip: Callable = lambda path, why: None,
            on_exclude: Callable = lambda path, why: None) -> PreviewTotals:
    """Walk `paths` as a backup would. on_file(entry, status) hears every
    file (status NEW, CHANGED or UNCHANGED); on_skip and on_exclude what the
    backup would skip or leave out. index: the client index (read only)."""
    rules = ExcludeRules.of(excludes)
    totals = PreviewTotals()

    def skipped(path, why):
        totals.skipped += 1
        on_skip(path, why)

    def excluded(path, why):
        totals.excluded += 1
        on_exclude(path, why)

    def classify(files, states):
        for entry in files:
            state = states.get(entry.path)
            status = UNCHANGED if state and state.unchanged(entry) else (
                CHANGED if state else NEW)
            totals.add(status, entry.size)
            on_file(entry, status)

    for root in (os.path.abspath(p) for p in paths):
        try:
            st = os.lstat(root)
        except OSError as err:
            skipped(root, f"cannot read: {err.strerror}")
            continue
        top = entry_of(root, st, skipped)
        if top is None:
            continue
        if top.kind == FILE:
            classify([top], index.states_known(os.path.dirname(root)))
            continue
        if top.kind != DIRECTORY:
            continue
        for listing in walk(root, (), skipped, rules.lister(root, excluded)):
            files = [e for e in listing.entries if e.kind == FILE]
            if index.dir_local(listing.path) == listing_fingerprint(listing.entries):
                for entry in files:
                    totals.add(UNCHANGED, entry.size)
                    on_file(entry, UNCHANGED)
            else:
                classify(files, index.states_known(listing.path))
    return totals
