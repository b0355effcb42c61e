"""Restored files under DEST: their temp and final names, and the writer of
small (and empty) files, which opens, writes and renames them on threads
of its own, made durable a batch at a time.

A file is written to a new temp name beside its place (`.N.flud-part`,
O_EXCL | O_NOFOLLOW from its parent's descriptor, SafeDest), its mode and
times set through its descriptor, and renamed to its own name (or to
NAME.flud-restored beside what is there: a restore never overwrites, not
even a file that appeared after it began; into_place, Place.rename_new).

Small files are written a batch at a time (BATCH_FILES files or
BATCH_BYTES bytes, whichever first, and what is left at the end): every
file of the batch is written to its temp name, then one sync of DEST's
filesystem (syncfs) makes all their data durable, and only then are they
renamed into place. One syncfs for 256 files of 1 KiB cost ~5 ms on this
machine's disk (0.02 ms a file); an fdatasync per file cost 0.2 ms a file.

What a crash in the middle leaves: the files of batches renamed before it
are complete and durable; the files of the batch being written (and of a
batch being renamed, not yet renamed) are temp files beside their places,
whole or partial, under fixed names (`.rHASH.flud-part`, made from the
file's name and content: overwrite.resume_temp). A rerun writes each of
them anew, or under `--overwrite if-changed` renames the ones that hold
their whole content into place without fetching them (a large file's temp:
keeps the segments that landed whole), so nothing is left behind either
way. A rerun with the default `--overwrite never` finds the files renamed
before the crash and restores each of them beside itself as
NAME.flud-restored (counted as `beside` in its summary, exit code 0 if
nothing else went wrong); a file whose NAME.flud-restored exists too fails
(exit code 1). (A writer made without a restore's Overwrite picks numbered
temp names `.N.flud-part` no file has.)

Opening a file takes ~0.4 ms of the disk's time under load, and on the
reactor thread it held up every RETRIEVE: so the writes, the syncs and the
renames are done by WRITE_THREADS threads of the writer's own, not the CPU
pool, which zfec decodes share (a sync may wait tens of milliseconds for
the disk). Two threads: while one waits for the disk, the other decrypts
and checks (AES and BLAKE3 release the GIL). With threads=0 the work is
done on the calling thread and its answers come on the reactor's next turn
(for unit tests on a fake reactor, as InlineBlockWriter).
"""
import ctypes
import itertools
import os
import queue
import threading

from twisted.internet import defer

from flud.client.restore.destdir import UnsafePath
from flud.errors import FludError

BESIDE_SUFFIX = ".flud-restored"
TEMP_SUFFIX = ".flud-part"
TEMP_TRIES = 100  # names tried for a temp file (one left by an interrupted run is kept)
WRITE_THREADS = 2
BATCH_FILES = 256                # small files made durable by one sync...
BATCH_BYTES = 8 * 1024 * 1024    # ...or this many bytes of them, whichever first

_FINISH = object()


class RestoreError(FludError):
    """A restore (or one of its files) cannot go on: nothing matches, DEST
    cannot be used, or a name is taken."""

    code = "RESTORE"


def into_place(place, put) -> tuple:
    """(name, beside): put(name) under the entry's own name, or as
    NAME.flud-restored beside what is there (beside True). put must fail
    with FileExistsError, never replace, when the name is taken
    (Place.rename_new, symlinkat): a name that appears between a check and
    the rename (another program, a second restore) is never replaced, so
    there is no check, only the attempt."""
    for name, beside in ((place.name, False), (place.name + BESIDE_SUFFIX, True)):
        try:
            put(name)
            return name, beside
        except FileExistsError:
            continue
    raise RestoreError(f"{place.rel}{BESIDE_SUFFIX} exists too; "
                       f"restore into an empty directory")


def new_temp(place, numbers, opener) -> tuple:
    """(name, opener(name)) of a new temp file beside the entry: a name no
    file has (one an interrupted run left is kept, not reused). numbers: an
    itertools.count shared by the run (next() on it is atomic)."""
    for _ in range(TEMP_TRIES):
        name = f".{next(numbers)}{TEMP_SUFFIX}"
        try:
            return name, opener(name)
        except FileExistsError:
            continue
    raise RestoreError(f"no free temp name beside {place.rel}: remove the "
                       f"*{TEMP_SUFFIX} files an interrupted restore left there")


def set_meta(fd, entry) -> None:
    """Mode and times through the file's own descriptor (never a path); an
    entry that carries more (restore/meta_restore.py: owner, xattrs, holes) has its
    applier set it all."""
    applier = getattr(entry, "applier", None)
    if applier is not None:
        applier.file(fd, entry)
        return
    os.fchmod(fd, entry.mode)
    os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))


def _load_syncfs():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_syncfs = _load_syncfs()


def sync_filesystem(fd: int) -> None:
    """Everything written to the filesystem of `fd` made durable (syncfs;
    sync() where there is none)."""
    if _syncfs is None:
        os.sync()
        return
    if _syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}")


class Landed:
    """An item's data for a file already written whole to `temp` (a killed
    restore's, checked: restore/in_place.py): renamed with its batch, not
    written again."""
    __slots__ = ("temp", "size")

    def __init__(self, temp: str, size: int):
        self.temp, self.size = temp, size


def _beside_or_new(place, temp: str) -> bool:
    """The default way into place (a restore's --overwrite never)."""
    return into_place(place, lambda name: place.rename_new(temp, name))[1]


class _Pending:
    """A file written to its temp name, waiting for its batch's sync."""
    __slots__ = ("entry", "temp", "beside", "size")

    def __init__(self, entry, temp, size):
        self.entry, self.temp, self.size = entry, temp, size
        self.beside = False   # known once renamed into place


class FileWriter:
    """Writes small files under a SafeDest, a batch made durable at a time.

    sink: the restore, told on the reactor of every file's outcome:
    file_done(entry, size, beside) once it is in place, file_refused(entry,
    why), file_failed(entry, error). sync(fd): makes the filesystem of fd
    durable (sync_filesystem; tests count calls)."""

    def __init__(self, reactor, dest, sink, sync=sync_filesystem, threads=WRITE_THREADS,
                 batch_files=BATCH_FILES, batch_bytes=BATCH_BYTES, overwrite=None):
        """overwrite: a restore/overwrite.Overwrite (None: never's way, today's:
        numbered temp names, beside what is there)."""
        self._reactor = reactor
        self._overwrite = overwrite
        self._put = overwrite.put if overwrite is not None else _beside_or_new
        self._dest = dest
        self._sink = sink
        self._sync = sync
        self._batch_files = batch_files
        self._batch_bytes = batch_bytes
        self.numbers = itertools.count(1)  # temp names, shared with the large files
        self._lock = threading.Lock()
        self._batch = []       # _Pending, under the lock
        self._batch_size = 0
        self._threads = []
        self._queue = queue.SimpleQueue()
        self._finished = None
        self._running = threads
        for i in range(threads):
            thread = threading.Thread(target=self._run, name=f"flud-restore-files-{i}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def write(self, items, done=None) -> None:
        """items: [(entry, data, opener)]: each file's bytes are opener(data)
        (None: not the file the manifest recorded; not written) or data
        itself where opener is None. done(refused) follows on the reactor
        once every item was written to its temp name (or not), refused
        being [(entry, data)] of those opener refused."""
        job = (items, done)
        if self._threads:
            self._queue.put(job)
        else:
            self._reactor.callLater(0, *self._do(job))

    def finish(self):
        """Fires on the reactor once every file handed over is in place (or
        its failure said): the last batch synced and renamed, the threads
        ended. Nothing may be written after."""
        self._finished = defer.Deferred()
        if self._threads:
            for _ in self._threads:
                self._queue.put(_FINISH)
        else:
            self._reactor.callLater(0, self._end)
        return self._finished

    def stop(self) -> None:
        """Ends the threads once the jobs queued are done (a run that
        failed; the files written so far still synced and renamed)."""
        for _ in self._threads:
            self._queue.put(_FINISH)
        for thread in self._threads:
            thread.join()
        self._threads = []

    # --- on the writer's threads (or inline) ---------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _FINISH:
                with self._lock:
                    self._running -= 1
                    last = not self._running
                if last:  # every job is done: the rest of the batch goes now
                    self._reactor.callFromThread(self._end_reported, self._take_batch(True))
                return
            self._reactor.callFromThread(*self._do(job))

    def _do(self, job):
        """Write a job's files to temp names; (callable, args) to run on the
        reactor with what it must hear."""
        items, done = job
        refused, outcomes = [], []
        for entry, data, opener in items:
            try:
                if isinstance(data, Landed):
                    pending = _Pending(entry, data.temp, data.size)
                else:
                    plain = opener(data) if opener is not None else data
                    if plain is None:
                        refused.append((entry, bytes(data)))
                        continue
                    pending = self._write_temp(entry, plain)
            except UnsafePath as err:
                outcomes.append(("refused", entry, err.why))
                continue
            except Exception as err:  # RestoreError, OSError; a bug fails the file, never hangs
                outcomes.append(("failed", entry, err))
                continue
            full = self._add(pending)
            if full:
                outcomes.extend(self._commit(full))
        return self._report, outcomes, done, refused

    def _write_temp(self, entry, plain) -> _Pending:
        with self._dest.place(entry.rel) as place:
            if self._overwrite is not None:   # a restore's: fixed names (overwrite.py)
                temp = self._overwrite.temp_name(place.name, entry.last)
                place.unlink(temp)   # a killed run's, not used (or not whole): anew
                fd = place.open_new(temp, 0o600)
            else:
                temp, fd = new_temp(place, self.numbers,
                                    lambda name: place.open_new(name, 0o600))
            try:
                try:
                    view = memoryview(plain)
                    while view:
                        view = view[os.write(fd, view):]
                    set_meta(fd, entry)
                finally:
                    os.close(fd)
            except BaseException:
                place.unlink(temp)
                raise
        return _Pending(entry, temp, len(plain))

    def _add(self, pending):
        """Into the open batch; the batch, taken, if it is now full."""
        with self._lock:
            self._batch.append(pending)
            self._batch_size += pending.size
            if (len(self._batch) < self._batch_files
                    and self._batch_size < self._batch_bytes):
                return None
        return self._take_batch(False)

    def _take_batch(self, commit_now):
        with self._lock:
            batch, self._batch, self._batch_size = self._batch, [], 0
        if commit_now:
            return self._commit(batch) if batch else []
        return batch or None

    def _commit(self, batch) -> list:
        """One sync for the batch, then its renames: [(outcome, entry, detail)]."""
        try:
            self._dest.sync(self._sync)
        except OSError as err:
            outcomes = []
            for pending in batch:
                self._drop(pending)
                outcomes.append(("failed", pending.entry, err))
            return outcomes
        outcomes = []
        for pending in batch:
            try:
                with self._dest.place(pending.entry.rel) as place:
                    pending.beside = self._put(place, pending.temp)
                outcomes.append(("done", pending.entry, pending))
            except UnsafePath as err:  # its directory changed meanwhile: left as it is
                outcomes.append(("refused", pending.entry, err.why))
            except (OSError, RestoreError) as err:
                self._drop(pending)
                outcomes.append(("failed", pending.entry, err))
        return outcomes

    def _drop(self, pending) -> None:
        try:
            with self._dest.place(pending.entry.rel) as place:
                place.unlink(pending.temp)
        except (UnsafePath, OSError):
            pass

    # --- on the reactor -----------------------------------------------------

    def _report(self, outcomes, done, refused) -> None:
        self._tell(outcomes)
        if done is not None:
            done(refused)

    def _tell(self, outcomes) -> None:
        for outcome, entry, detail in outcomes:
            if outcome == "done":
                self._sink.file_done(entry, detail.size, detail.beside)
            elif outcome == "refused":
                self._sink.file_refused(entry, detail)
            else:
                self._sink.file_failed(entry, detail)

    def _end(self) -> None:
        self._end_reported(self._take_batch(True))

    def _end_reported(self, outcomes) -> None:
        self._tell(outcomes)
        self._threads = []
        if self._finished is not None:  # None: stopped, not finished
            self._finished.callback(None)
