"""A client job that ends in an error no handler foresaw is not "done,
something skipped" (exit 1, Python's own for an uncaught exception): it
exits 2, and under --json still prints its one object with the error."""
import argparse
import json

import pytest

from flud.cli import jobs
from flud.cli.exits import EXIT_ERROR
from flud.errors import FludError


class Unreadable(FludError):
    code = "SOMETHING_TYPED"


@pytest.fixture
def home(tmp_path):
    from flud.client.home import create_home
    create_home(str(tmp_path / "home"), join=("127.0.0.1", 1)).close()
    return str(tmp_path / "home")


def _run(monkeypatch, home, err, as_json):
    def crash(fn, signals=False):
        raise err
    monkeypatch.setattr(jobs, "run_reactor", crash)
    return jobs.run_client(argparse.Namespace(home=home, json=as_json), "restore")


def test_a_bug_exits_2_with_a_json_error_and_its_traceback_on_stderr(home, monkeypatch,
                                                                    capsys):
    code = _run(monkeypatch, home, KeyError("3f2a"), as_json=True)
    out = capsys.readouterr()
    record = json.loads(out.out.splitlines()[-1])   # the summary line, after the error line
    assert code == EXIT_ERROR == record["exit"] and record["command"] == "restore"
    assert record["error"]["code"] == "UNEXPECTED"
    assert "KeyError" in record["error"]["message"] and "3f2a" in record["error"]["message"]
    assert "Traceback" in out.err and "a bug" in out.err


def test_a_typed_error_no_handler_caught_keeps_its_code(home, monkeypatch, capsys):
    code = _run(monkeypatch, home, Unreadable("the record is damaged"), as_json=True)
    out = capsys.readouterr()
    record = json.loads(out.out.splitlines()[-1])   # the summary line, after the error line
    assert code == EXIT_ERROR and record["error"]["code"] == "SOMETHING_TYPED"
    assert "the record is damaged" in record["error"]["message"]
    assert "Traceback" not in out.err


def test_without_json_the_message_goes_to_stderr(home, monkeypatch, capsys):
    code = _run(monkeypatch, home, RuntimeError("boom"), as_json=False)
    out = capsys.readouterr()
    assert code == EXIT_ERROR and out.out == ""
    assert "error: restore failed unexpectedly: RuntimeError: boom" in out.err


def test_a_reader_that_went_away_is_still_main_s_to_handle(home, monkeypatch):
    with pytest.raises(BrokenPipeError):
        _run(monkeypatch, home, BrokenPipeError(), as_json=False)

