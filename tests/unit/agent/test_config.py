"""agent.toml: the defaults flud init writes, and errors that name the line and key."""
import pytest

from flud.agent.config import (DEFAULT_PORT, DEFAULT_TEXT, ConfigError, load, parse,
                               parse_interval, parse_listen, parse_rate, parse_time_of_day,
                               write_default)


def test_the_written_defaults_read_back_as_the_defaults(tmp_path):
    path = write_default(str(tmp_path))
    assert open(path).read() == DEFAULT_TEXT
    config = load(str(tmp_path))
    assert config.listen == ("127.0.0.1", DEFAULT_PORT)
    assert config.upload == config.download == 0
    backup = config.jobs["backup"]
    assert backup.every == 6 * 3600 and backup.at is None and backup.options["paths"] == []
    assert config.jobs["verify"].every == 86400 and config.jobs["verify"].enabled
    assert config.jobs["forget"].options["keep_daily"] == 7
    assert config.jobs["check"].options["repair"] is True
    with pytest.raises(FileExistsError):
        write_default(str(tmp_path))   # never over the user's own


def test_a_missing_file_means_the_defaults(tmp_path):
    assert load(str(tmp_path)).jobs["backup"].every == 6 * 3600


def test_values_set_by_the_user():
    config = parse('[backup]\npaths = ["/a", "/b c"]\nat = "02:30"\n'
                   '[limits]\nupload = "10M"\ndownload = 512\n[agent]\nlisten = "127.0.0.2:9000"\n')
    assert config.jobs["backup"].options["paths"] == ["/a", "/b c"]
    assert config.jobs["backup"].at == (2, 30) and config.jobs["backup"].every is None
    assert config.upload == 10 * 1024 * 1024 and config.download == 512 * 1024
    assert config.listen == ("127.0.0.2", 9000)


def test_broken_toml_is_named_with_its_line():
    with pytest.raises(ConfigError) as err:
        parse('[backup]\npaths = ["/a"\nevery = "6h"\n', "/h/agent.toml")
    assert str(err.value).startswith("/h/agent.toml: line 3, column ")
    assert err.value.code == "AGENT_CONFIG"


@pytest.mark.parametrize("text, line, words", [
    ('[backup]\nevery = 6\n', 2, ["[backup] every", "a string"]),
    ('\n[verify]\nenabled = "yes"\n', 3, ["[verify] enabled", "true or false"]),
    ('[backup]\npaths = "/home/me"\n', 2, ["[backup] paths", "a list"]),
    ('[backup]\npaths = [1]\n', 2, ["list of strings"]),
    ('[backup]\nevery = "soon"\n', 2, ["[backup] every", "duration"]),
    ('[backup]\nevery = "30m"\n', 2, ["[backup] every", "'30min' for minutes or '30mo'"]),
    ('[limits]\nupload = "2MB"\n', 2, ["[limits] upload", "'MB' is ambiguous"]),
    ('[backup]\nat = "25:00"\n', 2, ["[backup] at", "time of day"]),
    ('[backup]\nevery = "1h"\nat = "02:00"\n', 3, ["not both"]),
    ('[forget]\nkeep_hourly = 3\n', 2, ["[forget] keep_hourly", "unknown key"]),
    ('[limits]\nupload = "fast"\n', 2, ["[limits] upload", "rate"]),
    ('[agent]\nlisten = "0.0.0.0:8786"\n', 2, ["[agent] listen", "loopback"]),
    ('[agent]\nhistory = 0\n', 2, ["[agent] history"]),
    ('[nightly]\nx = 1\n', 1, ["unknown section [nightly]"]),
    ('[backup]\nexclude_larger_than = "huge"\n', 2, ["[backup] exclude_larger_than", "size"]),
    ('[backup]\nexclude_caches = "yes"\n', 2, ["[backup] exclude_caches", "true or false"]),
    ('[backup]\n\nexclude_if_present = ["a/b"]\n', 3, ["[backup] exclude_if_present"]),
    ('[backup]\nexclude_file = "/e"\n', 2, ["[backup] exclude_file", "a list"]),
])
def test_a_wrong_value_is_named_by_line_and_key(text, line, words):
    with pytest.raises(ConfigError) as err:
        parse(text, "agent.toml")
    message = str(err.value)
    assert f"agent.toml: line {line}: " in message, message
    for word in words:
        assert word in message, message


def test_parsers():
    assert parse_interval("90s") == 90 and parse_interval("1w") == 7 * 86400
    assert parse_time_of_day("7:05") == (7, 5)
    assert parse_rate("500K") == 500 * 1024 and parse_rate("1.5M") == 1536 * 1024
    assert parse_rate("100") == 100 * 1024 and parse_rate(0) == 0
    assert parse_listen("[::1]:80") == ("::1", 80) and parse_listen("localhost:1")[1] == 1
    for bad in ("10.0.0.1:80", "example.org:80", "127.0.0.1", "127.0.0.1:99999"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    with pytest.raises(ValueError):
        parse_rate(True)
