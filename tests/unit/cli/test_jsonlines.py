"""The --json lines of a run (flud/cli/jsonlines.py) on a task.Clock: a
status line at the start and every second, an error line per logged
warning or error, RFC 3339 times."""
import io
import json
import logging

from twisted.internet import task

from flud.cli.jsonlines import SCHEMA_VERSION, JsonLines, rfc3339, summary_line
from flud.client.progress import Progress


def test_status_every_second_and_errors_as_they_come():
    clock = task.Clock()
    out = io.StringIO()
    progress = Progress("backup", stream=io.StringIO(), quiet=True)
    lines = JsonLines(clock, out, "backup", progress, clock=lambda: 1_795_706_973.5)
    lines.start()
    progress.start(10, 1000)
    for _ in range(3):
        progress.file_done(250)
        clock.advance(1.0)
    logging.getLogger("flud.client").warning("cannot read /d/x: permission denied")
    progress.warn("skipped /d/y: a fifo")
    lines.stop()
    clock.advance(5.0)   # stopped: no more lines
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    status = [g for g in got if g["type"] == "status"]
    assert [s["elapsed"] for s in status] == [0.0, 1.0, 2.0, 3.0]
    assert status[-1]["files_done"] == 3 and status[-1]["percent_done"] == 75.0
    assert status[-1]["seconds_remaining"] == 1.0
    errors = [g for g in got if g["type"] == "error"]
    assert [(e["level"], e["code"]) for e in errors] == [("warning", "WARNING")] * 2
    assert errors[0]["message"] == "cannot read /d/x: permission denied"
    assert all(g["schema"] == SCHEMA_VERSION and g["command"] == "backup" for g in got)
    assert got[0]["time"] == "2026-11-26T15:29:33.500Z"


def test_a_short_job_prints_only_its_summary_and_times_are_utc():
    clock = task.Clock()
    out = io.StringIO()
    lines = JsonLines(clock, out, "ls", Progress("ls", quiet=True))
    lines.start()
    clock.advance(3)
    lines.stop()
    assert out.getvalue() == ""
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    last = json.loads(summary_line("ls", {"exit": 0, "type": "x", "snapshots": []},
                                   clock=lambda: 0.25))
    assert last == {"type": "summary", "schema": SCHEMA_VERSION, "command": "ls",
                    "time": "1970-01-01T00:00:00.250Z", "exit": 0, "snapshots": []}
