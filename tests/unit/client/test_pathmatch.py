"""flud/client/pathmatch.py: gitignore semantics, composition, errors with lines."""
import pytest

from flud.client.pathmatch import MatcherChain, PathMatcher, PatternError


def matcher(*lines, base=""):
    return PathMatcher.from_lines(lines, source="test", base=base)


def test_bare_name_matches_at_any_depth():
    m = matcher("*.log")
    assert m.matches("x.log", False)
    assert m.matches("a/b/x.log", False)
    assert not m.matches("x.txt", False)


def test_negation_last_matching_line_wins():
    m = matcher("*.log", "!keep.log")
    assert m.matches("a.log", False)
    assert not m.matches("keep.log", False)
    assert m.check("keep.log", False) is False
    assert m.check("other.txt", False) is None
    # order matters: a later pattern re-excludes
    m = matcher("*.log", "!keep.log", "keep.log")
    assert m.matches("keep.log", False)


def test_leading_slash_anchors_to_the_base():
    m = matcher("/top")
    assert m.matches("top", False)
    assert m.matches("top", True)
    assert not m.matches("d/top", False)
    nested = matcher("/top", base="a/b")
    assert nested.matches("a/b/top", True)
    assert not nested.matches("a/b/c/top", True)
    assert not nested.matches("top", True)


def test_slash_inside_anchors_too():
    m = matcher("a/b")
    assert m.matches("a/b", False)
    assert not m.matches("x/a/b", False)


def test_trailing_slash_matches_directories_only():
    m = matcher("build/")
    assert m.matches("build", True)
    assert m.matches("src/build", True)
    assert not m.matches("build", False)
    # what lies under a matched directory is matched too (for callers that
    # ask about files without walking, e.g. restore)
    assert m.matches("build/out.o", False)


def test_double_star():
    m = matcher("a/**/z", "**/tmp", "logs/**")
    assert m.matches("a/z", False)
    assert m.matches("a/b/c/z", False)
    assert m.matches("x/y/tmp", True)
    assert m.matches("logs/one", False)
    assert not m.matches("logs", False)


def test_base_limits_what_a_matcher_speaks_about():
    m = matcher("*.o", base="src")
    assert m.matches("src/x.o", False)
    assert m.matches("src/deep/x.o", False)
    assert m.check("other/x.o", False) is None
    assert m.check("srcx/x.o", False) is None
    assert m.check("src", True) is None


def test_comments_blank_lines_and_escapes():
    m = matcher("# comment", "", "   ", r"\#hash", r"\!bang", "trail\\ ")
    assert m.pattern_count == 3
    assert m.matches("#hash", False)
    assert m.matches("!bang", False)
    assert m.matches("trail ", False)
    assert not m.matches("comment", False)


def test_line_ends_are_stripped():
    m = PathMatcher.from_lines(["*.log\n", "*.tmp\r\n"])
    assert m.matches("a.log", False) and m.matches("a.tmp", False)


@pytest.mark.parametrize("bad", ["!", "\\", "[", "a[b", "/"])
def test_bad_pattern_names_source_and_line(bad):
    with pytest.raises(PatternError) as caught:
        PathMatcher.from_lines(["*.log", "# ok", bad], source="/home/u/.fludignore")
    error = caught.value
    assert error.source == "/home/u/.fludignore"
    assert error.line == 3
    assert error.pattern == bad
    assert error.code == "BAD_PATTERN"
    assert "/home/u/.fludignore:3" in str(error)


def test_from_patterns_names_the_source_without_a_line():
    with pytest.raises(PatternError) as caught:
        PathMatcher.from_patterns(["ok", "!"], source="--exclude")
    assert caught.value.line == 0
    assert str(caught.value).startswith("--exclude: bad pattern '!'")


def test_from_file(tmp_path):
    path = tmp_path / "excludes"
    path.write_bytes(b"\xef\xbb\xbf*.iso\n# c\n!keep.iso\n")
    m = PathMatcher.from_file(str(path))
    assert m.matches("x.iso", False)
    assert not m.matches("keep.iso", False)
    assert m.source == str(path)


def test_from_file_errors_name_the_file(tmp_path):
    with pytest.raises(PatternError) as caught:
        PathMatcher.from_file(str(tmp_path / "missing"))
    assert str(tmp_path / "missing") in str(caught.value)
    path = tmp_path / "latin1"
    path.write_bytes(b"*.log\ncaf\xe9\n")
    with pytest.raises(PatternError) as caught:
        PathMatcher.from_file(str(path))
    assert caught.value.line == 2 and "UTF-8" in str(caught.value)
    path = tmp_path / "bad"
    path.write_text("ok\n\n[\n")
    with pytest.raises(PatternError) as caught:
        PathMatcher.from_file(str(path))
    assert (caught.value.source, caught.value.line) == (str(path), 3)


def test_chain_deeper_matcher_decides():
    root = matcher("*.log", "cache/")
    deeper = matcher("!keep.log", base="a")
    deepest = matcher("keep.log", base="a/b")
    chain = MatcherChain().pushed(root).pushed(deeper)
    assert chain.matches("x.log", False)
    assert not chain.matches("a/keep.log", False)
    assert not chain.matches("a/z/keep.log", False)
    assert chain.matches("keep.log", False)            # deeper speaks only under a/
    assert chain.pushed(deepest).matches("a/b/keep.log", False)
    assert not chain.matches("a/b/keep.log", False)    # chains are immutable
    assert chain.check("a/other.txt", False) is None
    assert chain.matches("a/cache", True)


def test_chain_skips_empty_matchers():
    chain = MatcherChain().pushed(None).pushed(matcher("# only a comment"))
    assert not chain
    assert len(chain.pushed(matcher("x"))) == 1


def test_hit_names_the_deciding_line():
    root = PathMatcher.from_lines(["# c", "*.log", "!keep.log"], source="/r/.fludignore")
    deeper = PathMatcher.from_lines(["", "keep.log"], source="/r/a/.fludignore", base="a")
    chain = MatcherChain().pushed(root).pushed(deeper)
    hit = chain.hit("x.log", False)
    assert (hit.source, hit.line, hit.pattern, hit.include) == ("/r/.fludignore", 2, "*.log", True)
    assert str(hit) == "'*.log' (/r/.fludignore:2)"
    assert chain.hit("keep.log", False).include is False
    assert chain.hit("a/keep.log", False)[:3] == ("/r/a/.fludignore", 2, "keep.log")
    assert chain.hit("x.txt", False) is None
    flags = PathMatcher.from_patterns(["*.iso"], source="--exclude")
    assert str(flags.hit("a.iso", False)) == "'*.iso' (--exclude)"


def test_the_quick_rejection_agrees_with_pathspec():
    """_any_of only says early what pathspec would: compared on many paths."""
    import itertools
    import pathspec
    lines = ["*.log", "!keep.log", "build/", "/top", "a/**/z", "docs/*.pdf", "**/tmp",
             "logs/**", "[ab]?.txt", "\\#hash", "name\\ ", "*.o", "!/top/keep.o"]
    m = PathMatcher.from_lines(lines)
    assert m._any is not None
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    parts = ["a", "b", "top", "build", "docs", "tmp", "logs", "z", "x.log", "keep.log",
             "f.pdf", "ab.txt", "a1.txt", "#hash", "name ", "k.o", "keep.o"]
    checked = 0
    for depth in (1, 2, 3):
        for combo in itertools.product(parts, repeat=depth):
            path = "/".join(combo)
            for is_dir in (False, True):
                want = spec.check_file(path + ("/" if is_dir else "")).include
                assert m.check(path, is_dir) == want, (path, is_dir)
                checked += 1
    assert checked > 10000
