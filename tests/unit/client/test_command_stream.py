"""--stdin-from-command's stream (flud/client/backup/command_stream.py): a
command's output backed up in parts of one extent, over the in-memory
network; the part file is all the disk it takes; equal outputs share extents."""
import hashlib
import os
import sys

import pytest

from flud.client.backup import command_stream
from flud.client.backup.backup_job import Backup
from flud.client.backup.command_stream import (CommandFailed, CommandStream, make_placeholder,
                                               streaming_large_files)
from flud.client.progress import Progress
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_restore

MIB = 1024 * 1024
# 4 parts: three of one 256 KiB segment and a bit (what a dump of 100 MB does
# in 32 MiB parts of 2 MiB segments); hashes: nothing to compress
SEGMENT = 256 * 1024
COUNT = 3 * SEGMENT // 32 + 2000
SCRIPT = ("import sys, hashlib\n"
          "w = sys.stdout.buffer.write\n"
          f"for i in range({COUNT}): w(hashlib.sha256(str(i).encode()).digest())\n")
OUTPUT = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(COUNT))


@pytest.fixture
def world(tmp_path, monkeypatch):
    # one segment a part (an extent), as 32 MiB parts would be for a larger output
    monkeypatch.setattr(command_stream, "segments_per_extent", lambda segment_size: 1)
    world = make_world(tmp_path, nodes=12)
    world[1].config["segment_size"] = SEGMENT
    return world


def stream_backup(world, tmp_path, argv, name="db.sql"):
    clock, home, network = world
    folder = tmp_path / "stdin"
    folder.mkdir(exist_ok=True)
    stream = CommandStream(argv, str(folder / name), str(folder / f".{name}.part"))
    make_placeholder(stream.path, home.config["small_file_limit"])
    parts = []
    fill = stream.fill_part
    stream.fill_part = lambda limit: parts.append(fill(limit)) or parts[-1]
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds,
                 large_files=streaming_large_files(stream))
    stream.start()
    try:
        summary = run_until(clock, job.run([stream.path]))
    finally:
        stream.stop()
    assert not os.path.exists(stream.part_path)
    return summary, stream, parts


def test_output_streamed_in_parts_restores_byte_for_byte(world, tmp_path):
    segment = world[1].config["segment_size"]
    assert 3 * segment < len(OUTPUT) < 4 * segment
    summary, stream, parts = stream_backup(world, tmp_path, [sys.executable, "-c", SCRIPT])
    assert parts == [segment] * 3 + [len(OUTPUT) - 3 * segment]
    assert stream.bytes == len(OUTPUT)
    assert summary["files"] == 1 and summary["bytes"] == len(OUTPUT)
    manifest = snapshot_manifest(world, summary["snapshot"])
    [(rel, kind, size)] = [(e[0], e[1], e[4]) for e in manifest["entries"]]
    assert (rel, kind, size) == ("db.sql", "file", len(OUTPUT))
    record = manifest["contents"][manifest["entries"][0][5]]
    assert len(record["ext"]) == 4          # one extent a part
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0
    assert (tmp_path / "out" / "db.sql").read_bytes() == OUTPUT

    # the same output again: its extents are found stored, nothing is sent
    sent = summary["bytes_sent"]
    again, _, _ = stream_backup(world, tmp_path, [sys.executable, "-c", SCRIPT])
    assert again["bytes_sent"] < sent / 10 and again["bytes"] == len(OUTPUT)


def test_a_failing_command_makes_no_snapshot(world, tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.stdout.write('x' * 5000); sys.exit(3)"]
    with pytest.raises(CommandFailed) as caught:
        stream_backup(world, tmp_path, argv)
    assert "exited with 3 after 5000 bytes" in str(caught.value)
    assert "no snapshot" in str(caught.value)
    assert world[1].index.snapshots() == []


def test_empty_output_is_an_empty_file(world, tmp_path):
    summary, _, _ = stream_backup(world, tmp_path, [sys.executable, "-c", "pass"])
    manifest = snapshot_manifest(world, summary["snapshot"])
    assert [(e[0], e[1], e[4]) for e in manifest["entries"]] == [("db.sql", "file", 0)]


def test_a_command_that_cannot_start(tmp_path):
    stream = CommandStream(["/nonexistent/cmd"], str(tmp_path / "p"), str(tmp_path / "q"))
    with pytest.raises(CommandFailed, match="cannot run `/nonexistent/cmd`"):
        stream.start()
    stream.stop()
