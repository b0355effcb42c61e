"""A restored large file's blocks, opened and written on threads of their own.

The reactor hands over each block as it arrives, with its offset in the file
and what opens it (check its hash, decrypt it in place), and goes on
receiving. One of WRITER_THREADS threads opens it and writes it where it
belongs (PositionalWriter: O_DIRECT, any order), then says so on the
reactor, which hands the buffer back for the next RETRIEVE.

Going through the CPU pool to open a block and back to the reactor, then to
a writer and back again, cost four thread handoffs per block, each waiting
for a core on a busy two-core machine: in a 1 GiB restore, half of the
file's 8 block buffers were waiting on handoffs instead of carrying
RETRIEVEs. Two threads: while one waits for the device, the other decrypts
(AES, BLAKE3 and the writes release the GIL).

The queue holds at most the file's block buffers (BlockBuffers bounds them).

InlineBlockWriter does the same work on the calling thread and answers on
the next turn of the reactor: a restore is given one or the other (its
`block_writer`), so unit tests on a fake reactor run without threads and
no code asks whether it is under test. Its small files go the same way:
`file_threads` says how many threads their writer (files.FileWriter) has,
none for InlineBlockWriter.
"""
import queue
import threading

from twisted.internet import defer

from flud.client.restore.file_writer import WRITE_THREADS

WRITER_THREADS = 2

_FINISH = object()
_STOP = object()


class _Writer:
    """What both writers share: a piece is opened, then written at its
    offset; the first write error stops the rest."""

    def __init__(self, reactor, out):
        """out: a PositionalWriter."""
        self._reactor = reactor
        self._out = out
        self.error = None  # the first write error, as the reactor saw it
        self._failed = None  # the same, as the threads see it at once
        self._stopped = False
        self._lock = threading.Lock()

    def write(self, offset: int, piece, done, opener=None) -> None:
        """Write piece at offset: opener(piece) first if given (the bytes to
        write, or None: refused, not written). done(written, piece) follows
        on the reactor, written being what was written or None (refused, or
        dropped after a write error: `error` says which)."""
        if self._stopped:
            return  # a late block of a file that failed: its file is closed
        self._submit((offset, piece, done, opener))

    def _do(self, job):
        """Open and write one job; what was written, or None."""
        offset, piece, done, opener = job
        if self._failed is not None:
            return None
        view = opener(piece) if opener is not None else piece
        if view is None:
            return None
        try:
            self._out.write_at(offset, view)
        except BaseException as err:
            with self._lock:
                if self._failed is None:
                    self._failed = err
            self._report_error(err)
            return None
        return view

    def _saw_error(self, err) -> None:
        if self.error is None:
            self.error = err


class InlineBlockWriter(_Writer):
    """Opens and writes on the calling thread; done() on the reactor's next
    turn (as a CPUPool with inline=True, for unit tests on a fake reactor)."""

    file_threads = 0

    def _submit(self, job) -> None:
        written = self._do(job)
        self._reactor.callLater(0, job[2], written, job[1])

    def _report_error(self, err) -> None:
        self._saw_error(err)

    def finish(self, length: int) -> defer.Deferred:
        if self._failed is None:
            return defer.maybeDeferred(self._out.finish, length)
        return defer.fail(self._failed)

    def stop(self) -> None:
        self._stopped = True


class BlockWriter(_Writer):
    """Opens and writes on `threads` threads of its own."""

    file_threads = WRITE_THREADS

    def __init__(self, reactor, out, threads: int = WRITER_THREADS):
        """out: a PositionalWriter."""
        super().__init__(reactor, out)
        self._queue = queue.SimpleQueue()
        self._finished = defer.Deferred()
        self._length = 0
        self._running = threads
        self._threads = [threading.Thread(target=self._run, name=f"flud-restore-writer-{i}",
                                          daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def _submit(self, job) -> None:
        self._queue.put(job)

    def _report_error(self, err) -> None:
        self._reactor.callFromThread(self._saw_error, err)

    def finish(self, length: int) -> defer.Deferred:
        """Fires once every piece is written and the file is `length` bytes
        and durable, or fails with the first write error (`error`, seen on
        the reactor as soon as it happens: after it, pieces are handed back
        unwritten, so no fetch waits on a buffer that never comes back)."""
        self._length = length
        for _ in self._threads:
            self._queue.put(_FINISH)
        return self._finished

    def stop(self) -> None:
        """Drop what is not written yet; returns once the threads have
        stopped (so the file may be closed): at most one write's wait."""
        self._stopped = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        call = self._reactor.callFromThread
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            if job is _FINISH:
                with self._lock:
                    self._running -= 1
                    last = not self._running
                if last:  # every job before the FINISH marks is done
                    self._finish_file(call)
                return
            try:
                written = self._do(job)
            except BaseException as err:  # an opener's bug: the file fails, nothing hangs
                with self._lock:
                    if self._failed is None:
                        self._failed = err
                call(self._saw_error, err)
                written = None
            call(job[2], written, job[1])

    def _finish_file(self, call) -> None:
        error = self._failed
        if error is None:
            try:
                self._out.finish(self._length)
            except BaseException as err:  # reported on the reactor
                error = err
        if error is None:
            call(self._finished.callback, None)
        else:
            call(self._finished.errback, error)
