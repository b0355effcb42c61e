"""`flud backup --dry-run` in-process (it needs no node): its JSON lines (a
"file" line per file, the summary last: docs/json.md), on success and on a
bad pattern, whatever the file names; usage errors."""
import json
import os

import pytest

from flud.cli.main import main


def dry_run_record(out: str) -> dict:
    """The summary line, with the "file" lines before it as its "files"."""
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]["type"] == "summary"
    assert all(line["type"] in ("file", "error") for line in lines[:-1])
    return {**lines[-1], "files": [line for line in lines if line["type"] == "file"]}


@pytest.fixture
def home(tmp_path):
    from flud.client.home import create_home
    create_home(str(tmp_path / "home"), join=("127.0.0.1", 1)).close()
    return str(tmp_path / "home")


def test_dry_run_json_lines_even_for_names_that_are_not_utf8(home, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"12345")
    with open(os.path.join(os.fsencode(src), b"caf\xe9.txt"), "wb") as f:
        f.write(b"xy")
    (src / "skip.log").write_bytes(b"x")
    (src / ".fludignore").write_bytes(b"*.log\n")
    code = main(["backup", str(src), "--home", home, "--dry-run", "--json"])
    record = dry_run_record(capsys.readouterr().out)
    assert code == 0 == record["exit"] and record["dry_run"] is True
    assert sorted(f["size"] for f in record["files"]) == [2, 5, 6]
    assert {f["status"] for f in record["files"]} == {"new"}
    assert (record["new"], record["new_bytes"], record["excluded"]) == (3, 13, 1)
    assert record["excluded_paths"] == [[str(src / "skip.log"),
                                         f"matches '*.log' ({src}/.fludignore:1)"]]
    assert not os.path.exists(os.path.join(home, "index.sqlite"))   # nothing written
    # the text form prints the name it cannot decode with a replacement character
    assert main(["backup", str(src), "--home", home, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "caf\ufffd.txt" in out and "3 new (13 B)" in out and "1 excluded" in out


def test_dry_run_bad_pattern_ends_in_a_summary_with_the_error(home, tmp_path, capsys):
    src = tmp_path / "src"
    (src / "deep").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"1")
    (src / "deep" / ".fludignore").write_bytes(b"ok\n!\n")
    code = main(["backup", str(src), "--home", home, "--dry-run", "--json"])
    record = dry_run_record(capsys.readouterr().out)
    assert code == 2 == record["exit"]
    assert record["error"]["code"] == "BAD_PATTERN"
    assert f"{src}/deep/.fludignore:2: bad pattern '!'" in record["error"]["message"]


@pytest.mark.parametrize("argv, words", [
    ([], "name the paths"),
    (["--stdin-from-command"], "needs the command"),
    (["x", "--stdin-filename", "n"], "goes with --stdin-from-command"),
    (["--stdin-from-command", "--stdin-filename", "a/b", "--", "true"], "without '/'"),
    (["--stdin-from-command", "--dry-run", "--", "true"], "cannot run a command"),
])
def test_usage_errors_exit_2_with_a_message(home, capsys, argv, words):
    assert main(["backup", "--home", home, "--json", *argv]) == 2
    out = capsys.readouterr()
    assert words in out.err
    assert json.loads(out.out.splitlines()[-1])["error"]["code"] == "USAGE"
