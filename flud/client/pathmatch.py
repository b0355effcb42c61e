"""Path patterns in gitignore syntax: which relative paths a set of lines matches.

One matcher for every place a user writes paths to leave out or pick:
`.fludignore` files in the backed-up tree, `--exclude-file`, and restore's
`--include`/`--exclude`. The syntax is git's (`**`, `!` to negate, a leading
`/` anchors to the file's own directory, a trailing `/` matches directories
only, the last matching line wins), so a user's habits from .gitignore carry
over. Parsing and matching are pathspec's (a maintained implementation of
git's edge cases); this module adds what a backup needs around it:

- an error that names the file and the line of a bad pattern;
- a three-valued answer (`check`: matched / negated / no line matched), so
  nested ignore files compose the way git's do: the deepest file with an
  opinion decides (`MatcherChain`).

Paths are relative, '/'-separated, without a leading '/' ("a/b/c.txt").
"""
from __future__ import annotations

import re
from typing import Iterable, NamedTuple, Optional

import pathspec

from flud.errors import FludError

IGNORE_FILE_NAME = ".fludignore"
# An ignore file is a handful of lines; a bigger one is a mistake (or not text).
MAX_PATTERN_FILE_BYTES = 1 << 20


class PatternError(FludError, ValueError):
    """A pattern line that cannot mean what its author wanted.

    source and line say where it is (line counts from 1; 0 when the pattern
    did not come from a file), so the message can point at it."""

    code = "BAD_PATTERN"

    def __init__(self, source: str, line: int, pattern: str, reason: str):
        self.source = source
        self.line = line
        self.pattern = pattern
        self.reason = reason
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: bad pattern {pattern!r}: {reason}")


def _compile_line(text: str, source: str, line: int):
    """The pathspec pattern for one line, or None for a blank or comment line."""
    if not text.strip() or text.startswith("#"):
        return None
    if "\0" in text:
        raise PatternError(source, line, text, "contains a NUL byte")
    try:
        spec = pathspec.GitIgnoreSpec.from_lines([text])
    except ValueError as error:
        raise PatternError(source, line, text, str(error)) from None
    pattern = spec.patterns[0]
    if pattern.include is None:
        # pathspec turns a line it cannot read into a pattern that matches
        # nothing (an unclosed '[', a lone '/'): silently ignoring what the
        # user wrote would back up what they meant to leave out.
        raise PatternError(source, line, text, "matches nothing (an unclosed '[' or a lone '/'?)")
    return pattern


def _any_of(patterns):
    """One regex that matches where any of the patterns' does, or None.

    A walk asks about every name in the tree and most match nothing:
    pathspec tries each pattern in turn (15 us a path for 20 patterns), one
    alternation rejects such a path in one pass. The patterns' named
    groups (their directory mark) become plain ones: names may not repeat."""
    sources = []
    for pattern in patterns:
        regex = getattr(pattern, "regex", None)
        if regex is None or regex.flags & ~re.UNICODE:
            return None
        sources.append(re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", regex.pattern))
    try:
        return re.compile("|".join(f"(?:{source})" for source in sources))
    except re.error:
        return None


class PatternHit(NamedTuple):
    """The line that decided a path: where it is, what it says, and whether
    it selects (True) or is a negation (False)."""
    source: str
    line: int          # 0 when the pattern did not come from a file
    pattern: str
    include: bool

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{self.pattern!r} ({where})"


class PathMatcher:
    """The lines of one pattern source, anchored at `base`.

    base is the relative path of the directory the patterns belong to ("" for
    the root): a `.fludignore` in "a/b" sees "a/b/x/y" as "x/y", and says
    nothing about paths outside "a/b"."""

    def __init__(self, patterns: list, source: str, base: str = "", lines: tuple = ()):
        """lines: (line number, text) of each pattern, for PatternHit."""
        self._spec = pathspec.GitIgnoreSpec(patterns)
        self._any = _any_of(patterns)
        self._lines = tuple(lines) or tuple((0, "?") for _ in patterns)
        self.source = source
        self.base = base.strip("/")
        self._prefix = self.base + "/" if self.base else ""
        self.pattern_count = len(patterns)

    @classmethod
    def from_lines(cls, lines: Iterable[str], source: str = "<patterns>",
                   base: str = "", first_line: int = 1) -> "PathMatcher":
        """Compile lines (with or without their line ends); a bad line raises
        PatternError naming source and its line number (from first_line)."""
        patterns, where = [], []
        for number, text in enumerate(lines, start=first_line):
            text = text.rstrip("\r\n")
            pattern = _compile_line(text, source, number)
            if pattern is not None:
                patterns.append(pattern)
                where.append((number, text))
        return cls(patterns, source, base, where)

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], source: str = "command line",
                      base: str = "") -> "PathMatcher":
        """Patterns given one by one (command-line flags, a config list): an
        error names the source and the pattern, with no line number."""
        compiled, where = [], []
        for text in patterns:
            pattern = _compile_line(text, source, 0)
            if pattern is not None:
                compiled.append(pattern)
                where.append((0, text))
        return cls(compiled, source, base, where)

    @classmethod
    def from_file(cls, path: str, base: str = "") -> "PathMatcher":
        """Read a pattern file (UTF-8). Unreadable, oversized or undecodable:
        PatternError naming the file (and the line, for bad bytes)."""
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_PATTERN_FILE_BYTES + 1)
        except OSError as error:
            raise PatternError(path, 0, "", f"cannot be read: {error.strerror or error}") from None
        if len(data) > MAX_PATTERN_FILE_BYTES:
            raise PatternError(path, 0, "", f"is larger than {MAX_PATTERN_FILE_BYTES} bytes")
        lines = []
        for number, raw in enumerate(data.split(b"\n"), start=1):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise PatternError(path, number, raw.decode("utf-8", "replace"),
                                   "is not UTF-8 text") from None
        if lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]   # an editor's byte-order mark is not part of the pattern
        return cls.from_lines(lines, source=path, base=base)

    def __bool__(self) -> bool:
        return self.pattern_count > 0

    def __repr__(self) -> str:
        return f"PathMatcher({self.source!r}, base={self.base!r}, {self.pattern_count} patterns)"

    def _result(self, relpath: str, is_dir: bool):
        if self._prefix:
            if not relpath.startswith(self._prefix):
                return None
            relpath = relpath[len(self._prefix):]
        if not relpath:
            return None
        if is_dir:
            relpath += "/"
        if self._any is not None and self._any.match(relpath) is None:
            return None   # no pattern matches: the answer pathspec would give, sooner
        return self._spec.check_file(relpath)

    def check(self, relpath: str, is_dir: bool) -> Optional[bool]:
        """True: the last line matching relpath is a pattern; False: it is a
        negation ('!'); None: no line matches, or relpath is outside base."""
        result = self._result(relpath, is_dir)
        return None if result is None else result.include

    def hit(self, relpath: str, is_dir: bool) -> Optional[PatternHit]:
        """The line that decides relpath (check's answer, with its place), or None."""
        result = self._result(relpath, is_dir)
        if result is None or result.include is None:
            return None
        line, text = self._lines[result.index]
        return PatternHit(self.source, line, text, result.include)

    def matches(self, relpath: str, is_dir: bool) -> bool:
        """Whether these patterns select relpath (a directory when is_dir)."""
        return self.check(relpath, is_dir) is True


class MatcherChain:
    """Pattern sources in precedence order, composed as git composes them.

    Matchers are pushed from the outermost (command-line excludes, an exclude
    file, the root's .fludignore) to the innermost (the .fludignore of the
    deepest directory); the innermost matcher with an opinion about a path
    decides. A chain is immutable: `pushed` returns a new one, so a walk can
    hand each directory its own chain and drop it when leaving."""

    __slots__ = ("_matchers",)

    def __init__(self, matchers: tuple = ()):
        self._matchers = tuple(m for m in matchers if m)

    def pushed(self, matcher: Optional[PathMatcher]) -> "MatcherChain":
        if not matcher:
            return self
        return MatcherChain(self._matchers + (matcher,))

    def __bool__(self) -> bool:
        return bool(self._matchers)

    def __len__(self) -> int:
        return len(self._matchers)

    def check(self, relpath: str, is_dir: bool) -> Optional[bool]:
        for matcher in reversed(self._matchers):
            verdict = matcher.check(relpath, is_dir)
            if verdict is not None:
                return verdict
        return None

    def matches(self, relpath: str, is_dir: bool) -> bool:
        return self.check(relpath, is_dir) is True

    def hit(self, relpath: str, is_dir: bool) -> Optional[PatternHit]:
        """The line that decides relpath, in the innermost matcher with an opinion."""
        for matcher in reversed(self._matchers):
            found = matcher.hit(relpath, is_dir)
            if found is not None:
                return found
        return None

