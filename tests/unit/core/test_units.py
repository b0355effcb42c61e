"""flud's one grammar of durations, sizes and rates (flud/units.py), as the
command line and agent.toml both read it."""
import pytest

from flud import units
from flud.agent.config import parse as parse_agent_toml
from flud.cli.main import build_parser


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("30min", 1800), ("6h", 6 * 3600), ("1d", 86400), ("1w 2d", 9 * 86400),
    ("1.5h", 5400), ("2 hours 30 minutes", 9000), ("0", 0), ("1wk1day1hr1min1sec", 694861),
])
def test_fixed_durations(text, seconds):
    assert units.parse_seconds(text) == seconds
    assert units.parse_seconds(units.format_seconds(seconds)) == seconds


@pytest.mark.parametrize("text", ["30m", "1y2m", "2M", "5 m"])
def test_a_bare_m_is_refused_naming_min_and_mo(text):
    with pytest.raises(units.BadDuration, match=r"'m' is ambiguous: write '\d+min' for "
                                                 r"minutes or '\d+mo' for months"):
        units.parse_duration(text)


def test_a_bare_number_needs_the_callers_unit():
    with pytest.raises(units.BadDuration, match="has no unit"):
        units.parse_duration("90")
    assert units.parse_seconds("90", bare="s") == 90


@pytest.mark.parametrize("text, size", [
    ("64M", 64 << 20), ("10GiB", 10 << 30), ("1.5k", 1536), ("123", 123), ("7 mib", 7 << 20),
    ("2T", 2 << 40), ("512B", 512),
])
def test_sizes(text, size):
    assert units.parse_size(text) == size


@pytest.mark.parametrize("text", ["10MB", "1kb", "3 GB"])
def test_decimal_looking_sizes_are_refused_naming_the_binary_spelling(text):
    with pytest.raises(units.BadSize, match="is ambiguous .*iB"):
        units.parse_size(text)


@pytest.mark.parametrize("text, rate", [
    ("1MiB/s", 1 << 20), ("500K", 500 << 10), ("512", 512 << 10), (0, 0), ("2M/s", 2 << 20),
    (100, 100 << 10),
])
def test_rates(text, rate):
    assert units.parse_rate(text) == rate


def test_the_command_line_and_agent_toml_read_durations_alike(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):   # 30 months or 30 minutes? neither: asked
        parser.parse_args(["forget", "--home", "h", "--keep-within", "30m"])
    assert "write '30min' for minutes or '30mo' for months" in capsys.readouterr().err
    args = parser.parse_args(["forget", "--home", "h", "--keep-within", "30mo"])
    assert units.parse_duration(args.keep_within).months == 30
    config = parse_agent_toml('[backup]\nevery = "30min"\n[agent]\njob_timeout = "2h"\n')
    assert config.jobs["backup"].every == 1800 and config.job_timeout == 7200
    args = parser.parse_args(["backup", "x", "--home", "h", "--memory-budget", "32M",
                              "--limit-upload", "1MiB/s"])
    assert args.memory_budget == 32 << 20 and args.limit_upload == 1 << 20
    assert parser.parse_args(["backup", "x", "--home", "h", "--memory-budget", "8"]
                             ).memory_budget == 8 << 20   # a number alone: MiB, as before
