"""`flud backup --stdin-from-command`: a command's output backed up as one
file, streamed: never whole in memory, never whole on disk.

The output is cut into parts of one extent each (EXTENT_BYTES: 32 MiB of
2 MiB segments). A part is copied from the pipe to a part file in the
client home, then sent as the large files' pipeline sends an extent of a
file (large_files.py: compression planned, encrypted, coded, streamed to n
nodes, committed); the next part is read once it is committed. So the
process holds one segment's footprint, as for any large file, and the disk
one extent: an extent sent again (a node failed) is read again from the
part file, which a pipe could not do. The file's content is the extents in
order, exactly as for a file of the same bytes, so equal outputs share
their extents (an extent whose first segment is known is reused).

The file stands in the backup as a placeholder in the home (HOME/stdin/NAME,
sparse, large enough to go the large files' way): the run's walk, index
and tree see an ordinary file; once the stream ends, the pending row gets
the stream's real size, and that is what the snapshot records. When the
command exits non-zero the run fails (CommandFailed): no snapshot.
"""
import hashlib
import os
import subprocess

from twisted.internet import defer

from flud.client.backup.large_files import LargeFiles, _SegmentBuffers
from flud.client.backup.plans import ExtentPlans
from flud.client.backup.source_scan import Entry
from flud.client.directio import SequentialReader
from flud.client.records import FILE, EmptyContent, LargeContent
from flud.client.repository.extents import segments_per_extent
from flud.errors import FludError

COPY_CHUNK = 1024 * 1024     # bytes moved from the pipe to the part file at a time


class CommandFailed(FludError):
    """The command could not run, failed, or its output could not be read."""

    code = "COMMAND_FAILED"


class CommandStream:
    """The command's stdout, read part by part into `part_path` (mode 0600).
    `path` is the placeholder the backup sees; start() runs the command."""

    def __init__(self, argv, path: str, part_path: str):
        self.argv = list(argv)
        self.path = path
        self.part_path = part_path
        self.bytes = 0
        self._proc = None
        self._chunk = bytearray(COPY_CHUNK)

    @property
    def shown(self) -> str:
        return " ".join(self.argv)

    def start(self) -> None:
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, bufsize=0)
        except OSError as err:
            raise CommandFailed(f"cannot run `{self.shown}`: {err.strerror or err}") from None

    def fill_part(self, limit: int) -> int:
        """(a worker thread) The next up to `limit` bytes of the output into
        the part file; fewer only at the end of the output."""
        fd = os.open(self.part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                     | os.O_NOFOLLOW, 0o600)
        got = 0
        view = memoryview(self._chunk)
        try:
            while got < limit:
                n = self._proc.stdout.readinto(view[:min(COPY_CHUNK, limit - got)])
                if not n:
                    break
                data = view[:n]
                while data:
                    data = data[os.write(fd, data):]
                got += n
        except OSError as err:
            raise CommandFailed(f"the output of `{self.shown}` could not be read or kept "
                                f"in {self.part_path}: {err.strerror or err}") from None
        finally:
            os.close(fd)
        self.bytes += got
        return got

    def finish(self) -> None:
        """(a worker thread) Wait for the command: CommandFailed unless it exited 0."""
        self._proc.stdout.close()
        status = self._proc.wait()
        if status != 0:
            how = f"was killed by signal {-status}" if status < 0 else f"exited with {status}"
            raise CommandFailed(f"`{self.shown}` {how} after {self.bytes} bytes of output: "
                                f"no snapshot was made")

    def stop(self) -> None:
        """Kill the command if it still runs (the backup ended early), and
        remove the part file."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._proc is not None and self._proc.stdout and not self._proc.stdout.closed:
            self._proc.stdout.close()
        try:
            os.unlink(self.part_path)
        except FileNotFoundError:
            pass


def make_placeholder(path: str, size: int) -> None:
    """The file the backup walks in place of the stream: `size` long (at
    least the small-file limit: the large files' way). Written, not a hole:
    a file of holes only is backed up as its data ranges (flud/client/
    sparse.py), which would take the stream's file out of the large files'
    way; the small-file limit is small, so this costs little disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        zeros = bytes(min(size, 1 << 20))
        left = size
        while left:
            left -= os.write(fd, zeros[:left])
    finally:
        os.close(fd)


def streaming_large_files(stream: CommandStream):
    """Backup's `large_files` class for a run whose one root is the stream."""
    def make(*args, **kwargs):
        return StreamLargeFiles(stream, *args, **kwargs)
    return make


class StreamLargeFiles(LargeFiles):
    """LargeFiles, with the placeholder's bytes taken from the command."""

    def __init__(self, stream: CommandStream, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stream = stream

    def _large(self, entry):
        if entry.path != self.stream.path:
            return super()._large(entry)
        return self._streamed(entry)

    @defer.inlineCallbacks
    def _streamed(self, entry):
        transfer = self.ctx.monitor.transfer("upload", entry.path)
        extents, digests, total = [], [], 0
        per_extent = segments_per_extent(self.segment_size)
        part_bytes = per_extent * self.segment_size
        try:
            yield transfer.reserve(self.segment_footprint, "segment")
            buffers = _SegmentBuffers(self.segment_window, self.segment_size)
            while True:
                length = yield self.ctx.pool.run(self.stream.fill_part, part_bytes)
                if not length:
                    break
                sent = yield self._part(entry, buffers, length, per_extent)
                extents.append(sent.record)
                digests.extend(sent.digests)
                total += length
                if length < part_bytes:
                    break
            yield self.ctx.pool.run(self.stream.finish)
        finally:
            transfer.close()
        # What the snapshot records: the stream's size, not the placeholder's.
        self.ctx.index.add_pending([Entry(entry.path, FILE, entry.mode, entry.mtime_ns, total,
                                          entry.ctime_ns, entry.inode)])
        self.ctx.progress.file_done(0)
        if not total:
            return self.contents.remember("empty", EmptyContent(0))
        content_id = "L" + hashlib.sha256(b"".join(digests)).hexdigest()
        if content_id in self.contents:
            self.summary["dedup"] += 1
            return content_id
        return self.contents.remember(content_id, LargeContent(total, extents=tuple(extents)))

    @defer.inlineCallbacks
    def _part(self, entry, buffers, length, per_extent):
        """One part (one extent) sent from the part file and committed."""
        part = Entry(self.stream.part_path, FILE, entry.mode, entry.mtime_ns, length,
                     entry.ctime_ns, entry.inode)
        count = -(-length // self.segment_size)
        with SequentialReader(part.path) as f:
            plans = ExtentPlans(self.ctx.pool, part, self.segment_size, per_extent)
            try:
                read = (part, f, buffers, plans)
                sent = yield self._extent(read, 0, count)
                sent = yield self._committed(read, sent)
            except GeneratorExit:
                plans.close()
                raise
            except BaseException:
                yield plans.close()
                raise
            yield plans.close()
        return sent
