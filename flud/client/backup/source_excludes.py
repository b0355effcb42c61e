"""What a backup leaves out, decided where the walk finds it.

The rules (ExcludeOptions, from the command line or agent.toml):

- `--exclude GLOB`: fnmatch on a name or a whole path (as before);
- `--exclude-file FILE`: gitignore-syntax patterns, relative to each
  backed-up root (as if in a .fludignore at its top);
- `.fludignore` files in the tree: gitignore syntax, relative to their own
  directory, nested (a deeper file overrides, `!` re-includes);
- `--exclude-caches`: a directory holding a CACHEDIR.TAG that starts with
  the signature of the Cache Directory Tagging Specification keeps only the tag;
- `--exclude-if-present NAME`: a directory holding NAME keeps only NAME;
- `--one-file-system`: a directory on another file system than its root
  (a mount point) is kept, empty;
- `--exclude-larger-than SIZE`: regular files above SIZE are left out.

An excluded directory is pruned where it is found: its name is matched in
its parent's listing, before any stat of it, and it is never listed; a
tagged directory is probed for its tag (one stat) before it is listed, so a
cache of 100,000 entries costs a stat, not a listing.

DirectoryLister is the walk's `list_children` for one root: it follows the
walk down (a stack of the open directories' pattern chains, as deep as the
tree), so memory does not grow with the number of directories.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import stat
from typing import Callable, Optional

from flud.client.pathmatch import IGNORE_FILE_NAME, MatcherChain, PathMatcher, PatternError
from flud.client.backup.source_scan import entry_of

__all__ = ["ExcludeOptions", "ExcludeRules", "DirectoryLister", "PatternError", "parse_size",
           "CACHEDIR_TAG", "CACHEDIR_SIGNATURE", "IGNORE_FILE_NAME", "LARGER_THAN"]

CACHEDIR_TAG = "CACHEDIR.TAG"
# https://bford.info/cachedir/: the tag must begin with exactly these bytes
CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"

LARGER_THAN = "larger than --exclude-larger-than"   # a reason's start: the summary lists these
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def parse_size(text) -> int:
    """'500K', '10M', '2G', '1T' (powers of 1024) or a number of bytes."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as \"500M\" or \"2G\", got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative, got {text!r}")
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtb]?)(?:i?b)?\s*", str(text).lower())
    if not match:
        raise ValueError(f"expected a size such as \"500M\" or \"2G\", got {text!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


@dataclasses.dataclass(frozen=True)
class ExcludeOptions:
    """What the user asked to leave out (nothing read yet)."""
    globs: tuple = ()               # --exclude
    exclude_files: tuple = ()       # --exclude-file
    exclude_caches: bool = False    # --exclude-caches
    if_present: tuple = ()          # --exclude-if-present
    one_file_system: bool = False   # --one-file-system
    larger_than: Optional[int] = None  # --exclude-larger-than, bytes
    ignore_files: bool = True       # read .fludignore files in the tree

    def compile(self) -> "ExcludeRules":
        """The rules, with the exclude files read (PatternError names a bad
        file and line before anything is walked)."""
        for name in self.if_present:
            if not name or "/" in name or name in (".", ".."):
                raise PatternError("--exclude-if-present", 0, name, "expected a file name")
        matchers = tuple(PathMatcher.from_file(path) for path in self.exclude_files)
        return ExcludeRules(self, MatcherChain(matchers))


class ExcludeRules:
    """Compiled rules, shared by every walk of a backup (the first walk, the
    tree's, a dry run's): the same answers each time."""

    def __init__(self, options: ExcludeOptions, base_chain: MatcherChain):
        self.options = options
        self.base_chain = base_chain
        self._markers = ((CACHEDIR_TAG,) if options.exclude_caches else ()) + tuple(
            name for name in options.if_present if name != CACHEDIR_TAG or not
            options.exclude_caches)

    @classmethod
    def of(cls, excludes) -> "ExcludeRules":
        """Rules from ExcludeRules, ExcludeOptions or a list of globs (the
        old `excludes` argument)."""
        if isinstance(excludes, ExcludeRules):
            return excludes
        if isinstance(excludes, ExcludeOptions):
            return excludes.compile()
        return ExcludeOptions(globs=tuple(excludes or ())).compile()

    def lister(self, root: str, on_exclude: Callable = lambda path, why: None
               ) -> "DirectoryLister":
        return DirectoryLister(self, root, on_exclude)


class DirectoryLister:
    """list_children(path, _, on_skip) for the walk of one root. Calls must
    follow a depth-first walk (each directory listed after its parent), as
    flud/client/backup/source_walk.py does; on_exclude(path, why) hears each pruned path."""

    def __init__(self, rules: ExcludeRules, root: str, on_exclude: Callable):
        self.rules = rules
        self.options = rules.options
        self.root = root.rstrip("/") or "/"
        self.on_exclude = on_exclude
        self.excluded = 0
        self._root_device = None
        if self.options.one_file_system:
            try:
                self._root_device = os.lstat(self.root).st_dev
            except OSError:
                pass   # the walk says the root cannot be read
        # (path, its chain) of the directories on the current path, outermost first
        self._open = []

    def _relative(self, path: str) -> str:
        return path[len(self.root):].lstrip("/")

    def _exclude(self, path: str, why: str) -> None:
        self.excluded += 1
        self.on_exclude(path, why)

    def _parent_chain(self, path: str) -> MatcherChain:
        while self._open:
            top = self._open[-1][0]
            if path.startswith(top.rstrip("/") + "/"):
                return self._open[-1][1]
            self._open.pop()
        return self.rules.base_chain

    def __call__(self, path: str, _excludes, on_skip) -> list:
        chain = self._parent_chain(path)
        if self._root_device is not None and path != self.root:
            try:
                device = os.lstat(path).st_dev
            except OSError as err:
                on_skip(path, f"vanished or unreadable: {err.strerror}")
                return []
            if device != self._root_device:
                self._exclude(path, "on another file system (--one-file-system): kept empty")
                return []
        marker = self._marker(path)
        if marker is not None:
            return self._only(marker, on_skip)
        try:
            with os.scandir(path) as listing:
                found = sorted(listing, key=lambda e: e.name)
        except OSError as err:
            on_skip(path, f"cannot list: {err.strerror}")
            return []
        relative = self._relative(path)
        if self.options.ignore_files and any(e.name == IGNORE_FILE_NAME for e in found):
            chain = chain.pushed(PathMatcher.from_file(os.path.join(path, IGNORE_FILE_NAME),
                                                       base=relative))
        self._open.append((path, chain))
        prefix = relative + "/" if relative else ""
        children = []
        for child in found:
            entry = self._kept(child, chain, prefix, on_skip)
            if entry is not None:
                children.append(entry)
        return children

    def _kept(self, child, chain, prefix: str, on_skip):
        """The entry of one child of a listed directory, or None: left out
        (--exclude, an ignore file's pattern, --exclude-larger-than: said
        as excluded) or unreadable (said to on_skip)."""
        globs = self.options.globs
        limit = self.options.larger_than
        glob = globs and next((p for p in globs if fnmatch.fnmatch(child.name, p)
                               or fnmatch.fnmatch(child.path, p)), None)
        if glob:
            self._exclude(child.path, f"matches --exclude {glob!r}")
            return None
        if chain:
            try:
                is_dir = child.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            hit = chain.hit(prefix + child.name, is_dir)
            if hit is not None and hit.include:
                self._exclude(child.path, f"matches {hit}")
                return None
        try:
            child_st = child.stat(follow_symlinks=False)
        except OSError as err:
            on_skip(child.path, f"vanished or unreadable: {err.strerror}")
            return None
        if limit is not None and stat.S_ISREG(child_st.st_mode) and child_st.st_size > limit:
            self._exclude(child.path, f"{LARGER_THAN}: {child_st.st_size} bytes")
            return None
        return entry_of(child.path, child_st, on_skip)

    def _marker(self, path: str) -> Optional[str]:
        """The tag or marker file that makes this directory keep only itself."""
        for name in self.rules._markers:
            candidate = os.path.join(path, name)
            try:
                st = os.lstat(candidate)
            except OSError:
                continue
            if name == CACHEDIR_TAG and self.options.exclude_caches:
                if stat.S_ISREG(st.st_mode) and _has_cache_signature(candidate):
                    self._exclude(path, "a cache (CACHEDIR.TAG): only the tag is kept")
                    return candidate
                if name not in self.options.if_present:
                    continue
            self._exclude(path, f"holds {name} (--exclude-if-present): only it is kept")
            return candidate
        return None

    @staticmethod
    def _only(marker: str, on_skip) -> list:
        try:
            st = os.lstat(marker)
        except OSError as err:
            on_skip(marker, f"vanished or unreadable: {err.strerror}")
            return []
        entry = entry_of(marker, st, on_skip)
        return [] if entry is None else [entry]


def _has_cache_signature(path: str) -> bool:
    try:
        with open(path, "rb") as tag:
            return tag.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE
    except OSError:
        return False
