"""A restored large file's writes, in order, on a thread of its own.

The reactor hands over each block as its segment is decrypted and goes on
receiving; the thread writes it (O_DIRECT: it waits for the device) and hands
its buffer back, so the next segment's RETRIEVEs start as each block is
written. Waiting for every write from the reactor instead (a pool call per
write) cost a thread handoff each way, ~1.2 ms on a busy two-core machine
against 0.3 ms for the write itself: half a 1 GiB restore was spent there.

The queue holds at most the file's block buffers (BlockBuffers bounds them).
"""
import queue
import threading

from twisted.internet import defer

_FINISH = object()
_STOP = object()


class BackgroundWriter:
    def __init__(self, reactor, out, written, inline: bool = False):
        """out: a SequentialWriter; written(piece) is called on the reactor
        once a piece is on disk. inline: write on the calling thread, for
        unit tests on a fake reactor (as CPUPool's switch)."""
        self._reactor = reactor
        self._out = out
        self._written = written
        self._queue = queue.SimpleQueue()
        self.error = None  # the first write error: every later write is skipped
        self._finished = defer.Deferred()
        self._inline = inline
        self._thread = None
        if not inline:
            self._thread = threading.Thread(target=self._run, name="flud-restore-writer",
                                            daemon=True)
            self._thread.start()

    def write(self, piece) -> None:
        if not self._inline:
            self._queue.put(piece)
            return
        if self.error is None:
            try:
                self._out.write_pieces([piece])
            except BaseException as err:
                self.error = err
        self._reactor.callLater(0, self._written, piece)

    def finish(self) -> defer.Deferred:
        """Fires once every piece is written and the file is durable, or
        fails with the first write error (`error`, seen by the reactor as
        soon as it happens: after it, pieces are handed back unwritten, so
        no fetch waits on a buffer that will never come back)."""
        if self._inline:
            if self.error is None:
                return defer.maybeDeferred(self._out.finish)
            return defer.fail(self.error)
        self._queue.put(_FINISH)
        return self._finished

    def stop(self) -> None:
        """Drop what is not written yet; returns once the thread has stopped
        (so the file may be closed): at most one write's wait."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        call = self._reactor.callFromThread
        failed = None  # this thread's own record of the first error
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if item is _FINISH:
                error = failed
                if error is None:
                    try:
                        self._out.finish()
                    except BaseException as err:  # reported on the reactor
                        error = err
                if error is None:
                    call(self._finished.callback, None)
                else:
                    call(self._finished.errback, error)
                return
            if failed is None:
                try:
                    self._out.write_pieces([item])
                except BaseException as err:
                    failed = err
                    call(self._failed, err)
            call(self._written, item)

    def _failed(self, err) -> None:
        if self.error is None:
            self.error = err
