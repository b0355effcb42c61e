"""A restore's `--include` and `--exclude`: which entries of the snapshot it
restores, which directories it walks into, and (with `--delete`) which
names under DEST it may remove.

Patterns are gitignore's (flud/client/pathmatch.py, the one matcher the
backup's excludes use too), matched against the paths `flud ls` shows
(`me/docs/x.txt` for `/home/me` backed up). A pattern anchored with a
leading `/` may also name the original absolute path (`/home/me/docs`):
it is made the snapshot's name of it, as a PATH argument is.

- An entry is restored when it matches an include (or lies under a
  directory that does; no include: everything) and matches no exclude.
- An excluded directory is not walked into: its records are not fetched.
- A directory that no include names is still walked into (something under
  it may match); it is made only if something under it is restored, and
  then gets its recorded mode and times.
- `--delete` removes a name under DEST only if the selection covers it (it
  would restore such a name): an excluded name is left alone.
"""
import os

from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.pathmatch import PathMatcher


def _named(pattern: str, roots) -> str:
    """An absolute pattern under a backed-up root, as the snapshot names it."""
    negated = pattern.startswith("!")
    body = pattern[1:] if negated else pattern
    if body.startswith("/") and len(body) > 1 and roots:
        trail = "/" if body.endswith("/") else ""
        plain = os.path.normpath(body.rstrip("/"))
        named = snapshot_paths(roots, [plain])[0]
        if named != plain:
            body = "/" + named + trail
    return ("!" if negated else "") + body


class Selection:
    """include, exclude: the patterns as given (PatternError for a bad one,
    naming it); roots: the snapshot's source paths."""

    def __init__(self, include=(), exclude=(), roots=()):
        include, exclude = list(include), list(exclude)
        self.include = (PathMatcher.from_patterns([_named(p, roots) for p in include],
                                                  "--include") if include else None)
        self.exclude = (PathMatcher.from_patterns([_named(p, roots) for p in exclude],
                                                  "--exclude") if exclude else None)

    def __bool__(self) -> bool:
        return self.include is not None or self.exclude is not None

    def excluded(self, path: str, is_dir: bool) -> bool:
        return self.exclude is not None and self.exclude.matches(path, is_dir)

    def wants(self, path: str, is_dir: bool) -> bool:
        """The entry at path is restored."""
        if self.excluded(path, is_dir):
            return False
        return self.include is None or self.include.matches(path, is_dir)

    def descends(self, path: str) -> bool:
        """The directory at path is walked into."""
        return not self.excluded(path, True)

    def describe(self) -> str:
        parts = []
        if self.include is not None:
            parts.append(f"--include ({self.include.pattern_count} patterns)")
        if self.exclude is not None:
            parts.append(f"--exclude ({self.exclude.pattern_count} patterns)")
        return ", ".join(parts)


EVERYTHING = Selection()
