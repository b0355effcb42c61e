"""A session: one op in flight at a time, issued back to back (or --delay apart).

The loop is written with plain callbacks, not inlineCallbacks, and keeps its
state in slots: the per-op cost is a few attribute writes, one request, and
one sample. An op that fails is counted by kind and the session goes on.
"""
import time

from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import (AuthenticationFailed, ConnectFailed, ConnectionLost,
                                  RemoteError)

MAX_OBJECTS = 100_000   # objects a session remembers; older ones are forgotten
ERROR_PAUSE = 0.01      # after a failed op, so a dead node cannot make a busy loop
NONCE = 16

_now = time.perf_counter


def error_kind(exc: BaseException) -> str:
    """A short, stable name for what went wrong: the error's own code for
    what the wire says (RemoteError: NO_SPACE, BUSY, CODE_<n> for a code we
    do not know) and for a connection that failed (CONNECT_FAILED,
    CONNECTION_LOST, AUTH_FAILED)."""
    if isinstance(exc, (RemoteError, ConnectFailed, ConnectionLost, AuthenticationFailed)):
        return str(exc.code)
    if isinstance(exc, (defer.TimeoutError, defer.CancelledError)):
        return "TIMEOUT"
    return "CLIENT_" + type(exc).__name__


class Phase:
    """What a session does next: op name, or None when it is finished."""

    delay = 0.0

    def __init__(self, recorder):
        self.recorder = recorder

    def next_op(self, session):
        raise NotImplementedError


class Session:
    __slots__ = ("w", "index", "rng", "objects", "phase", "finished", "counter", "nonce_base",
                 "op", "obj", "node", "t0", "first", "got", "hasher", "d", "conn",
                 "timed_out", "vnonce", "_in_loop", "_sync_done", "_pause")

    def __init__(self, worker, index: int, rng, nonce_base: bytes):
        self.w = worker
        self.index = index
        self.rng = rng
        self.objects = []   # (key, node, size, offset, prefix)
        self.phase = None
        self.finished = None
        self.counter = 0
        self.nonce_base = nonce_base  # 8 bytes: process and session
        self.op = None
        self.obj = None
        self.node = 0
        self.t0 = 0.0
        self.first = 0.0
        self.got = 0
        self.hasher = None
        self.d = None
        self.conn = None
        self.timed_out = False
        self.vnonce = b""
        self._in_loop = False
        self._sync_done = False
        self._pause = 0.0

    # ---- the loop ------------------------------------------------------------

    def start(self, phase) -> defer.Deferred:
        self.phase = phase
        self.finished = defer.Deferred()
        self._loop()
        return self.finished

    def _loop(self):
        # A trampoline: an op that completes synchronously (a node known to be
        # down) continues this loop instead of recursing.
        self._in_loop = True
        try:
            while True:
                op = self.phase.next_op(self)
                if op is None:
                    self._in_loop = False
                    finished, self.finished = self.finished, None
                    finished.callback(self)
                    return
                self._sync_done = False
                try:
                    self._start(op)
                except Exception as err:  # a bug here must not stop the run
                    self._record_error(err)
                if not self._sync_done:
                    return  # _complete resumes us
                if self._pause:
                    self.w.reactor.callLater(self._pause, self._loop)
                    return
        finally:
            self._in_loop = False

    def _complete(self, pause: float) -> None:
        self.d = None
        self.conn = None
        self._pause = pause
        if self._in_loop:
            self._sync_done = True
        elif pause:
            self.w.reactor.callLater(pause, self._loop)
        else:
            self._loop()

    # ---- one op ---------------------------------------------------------------

    def _start(self, op: str) -> None:
        w = self.w
        self.op = op
        self.timed_out = False
        if op == "store":
            self.counter += 1
            prefix = self.nonce_base + self.counter.to_bytes(8, "big")
            key, size, offset, prefix = w.payloads.new_object(w.sizes.draw(self.rng), prefix, self.rng)
            self.node = node = int(self.rng.random() * w.node_count)
            self.obj = (key, node, size, offset, prefix)
        else:
            objects = self.objects
            i = int(self.rng.random() * len(objects))
            self.obj = objects[i]
            self.node = self.obj[1]
            if op == "delete":
                objects[i] = objects[-1]
                objects.pop()
                w.payloads.forget(self.obj[0], self.obj[2])
        conn = w.connection(self.node)
        if conn is None:
            self._failed(ConnectFailed("cannot connect: the node was unreachable a moment ago"))
        elif isinstance(conn, defer.Deferred):
            conn.addCallbacks(self._send, self._failed)
        else:
            self._send(conn)

    def _send(self, conn) -> None:
        try:
            self._request(conn)
        except Exception as err:  # a bug here must not stall the session
            self.phase.recorder.error(self.op, "CLIENT_" + type(err).__name__)
            self._complete(ERROR_PAUSE)

    def _request(self, conn) -> None:
        op = self.op
        key, _, size, offset, prefix = self.obj
        self.conn = conn
        if op == "retrieve":
            self.got = 0
            self.first = 0.0
            self.hasher = self.w.new_hasher() if self.w.check else None
            self.t0 = _now()
            d = conn.request(Op.RETRIEVE, messages.RetrieveRequest(key, 0, messages.TO_END),
                             sink=self._sink)
        elif op == "store":
            head, rest = self.w.payloads.store_parts(size, offset, prefix)
            self.t0 = _now()
            d = conn.request(Op.STORE, messages.StoreRequest(key, messages.KIND_SHARE, size, head),
                             source=rest)
        elif op == "verify":
            self.vnonce = self.rng.randbytes(NONCE)
            self.t0 = _now()
            d = conn.request(Op.VERIFY, messages.VerifyRequest(key, self.vnonce, 0, size))
        else:
            self.t0 = _now()
            d = conn.request(Op.DELETE, messages.KeyOnly(key))
        self.d = d
        d.addCallbacks(self._ok, self._failed)

    def _sink(self, chunk) -> None:
        if not self.got:
            self.first = _now()
        self.got += len(chunk)
        if self.hasher is not None:
            self.hasher.update(chunk)

    def _ok(self, result) -> None:
        t1 = _now()
        lat = t1 - self.t0
        op = self.op
        obj = self.obj
        rec = self.phase.recorder
        try:
            if op == "retrieve":
                if self.got != obj[2]:
                    rec.error(op, "SHORT_READ")
                    self._complete(ERROR_PAUSE)
                    return
                if self.hasher is not None and self.hasher.digest() != obj[0]:
                    rec.error(op, "BAD_CONTENT")
                    self._complete(ERROR_PAUSE)
                    return
                rec.ok(op, lat, (self.first or t1) - self.t0, 0, self.got)
            elif op == "store":
                objects = self.objects
                if len(objects) < MAX_OBJECTS:
                    objects.append(obj)
                else:
                    objects[int(self.rng.random() * len(objects))] = obj
                rec.ok(op, lat, lat, obj[2], 0)
            elif op == "verify":
                if self.w.check:
                    want = self.w.payloads.verify_digest(self.vnonce, obj[2], obj[3], obj[4])
                    if result.digest != want:
                        rec.error(op, "BAD_DIGEST")
                        self._complete(ERROR_PAUSE)
                        return
                rec.ok(op, lat, lat, 0, 0)
            else:
                rec.ok(op, lat, lat, 0, 0)
        except Exception as err:
            self._record_error(err)
            self._complete(ERROR_PAUSE)
            return
        self._complete(self.phase.delay)

    def _failed(self, failure) -> None:
        exc = failure.value if hasattr(failure, "value") else failure
        if self.timed_out:
            kind = "TIMEOUT"
        else:
            kind = error_kind(exc)
        if self.op == "store":
            self.w.payloads.forget(self.obj[0], self.obj[2])
        self.phase.recorder.error(self.op, kind)
        self._complete(max(self.phase.delay, ERROR_PAUSE))

    def _record_error(self, err) -> None:
        self.phase.recorder.error(self.op or "store", "CLIENT_" + type(err).__name__)
        if not self._in_loop:
            return
        self._sync_done = True
        self._pause = ERROR_PAUSE

    # ---- the worker's watchdog ----------------------------------------------

    def check_timeout(self, now: float, limit: float) -> None:
        d = self.d
        if d is not None and not d.called and now - self.t0 > limit:
            self.timed_out = True
            conn = self.conn
            if conn is not None:
                conn.cancel(d)   # sends CANCEL; the Deferred fails with CANCELLED
            if not d.called:
                d.cancel()
