"""The PATHs a restore was asked for, as the snapshot names them: which
entries they select, and which of them matched nothing.

A PATH selects the entry of that name, everything under it, and the
directories above it (so it lands at its place under DEST). A directory
above a PATH does not make that PATH match: `restore a/x` where the
snapshot has `a` but no `a/x` matched nothing, and is reported as such.
"""
import os


def _plain(path: str) -> str:
    return os.path.normpath(path).strip("/")


class Wanted:
    """asked: the PATHs as the user gave them; named: the same as the
    snapshot names them (manifest.snapshot_paths). Call it with an entry's
    path (is it selected?); saw(path) for each entry found, and unmatched()
    says which PATHs no entry matched."""

    def __init__(self, asked, named):
        self.asked = list(asked)
        self._named = [_plain(p) for p in named]
        self._matched = [False] * len(self._named)

    def __bool__(self) -> bool:
        return bool(self._named)

    def __call__(self, path: str) -> bool:
        if not self._named:
            return True
        return any(path == w or path.startswith(w + "/") or w.startswith(path + "/")
                   for w in self._named)

    def within(self, path: str) -> bool:
        """path is a PATH asked for or under one (no PATH: everything is)."""
        return not self._named or any(path == w or path.startswith(w + "/")
                                      for w in self._named)

    def saw(self, path: str) -> None:
        """An entry at path is in the snapshot: the PATHs it falls under matched."""
        for i, w in enumerate(self._named):
            if not self._matched[i] and (path == w or path.startswith(w + "/")):
                self._matched[i] = True

    def unreadable(self, path: str) -> None:
        """The directory at path could not be read (path "." is the whole
        tree): the PATHs in it are not "matched nothing" but lost with it,
        which the restore reports as failed."""
        for i, w in enumerate(self._named):
            if path == "." or w == path or w.startswith(path + "/"):
                self._matched[i] = True

    def unmatched(self) -> list:
        """The PATHs (as given) that no entry seen matched."""
        return [asked for asked, hit in zip(self.asked, self._matched) if not hit]

    def nothing_matched(self) -> bool:
        return bool(self._named) and not any(self._matched)

    def describe(self) -> str:
        return ", ".join(self.asked)
