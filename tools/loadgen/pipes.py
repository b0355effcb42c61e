"""JSON lines over pipes, read from a Twisted reactor without threads."""
import json
import os

from twisted.python import log as twisted_log

MAX_LINE = 64 << 20


class LineReader:
    """An IReadDescriptor over a pipe fd that calls on_line(dict) per JSON line
    and on_eof() once when the writer is gone."""

    def __init__(self, reactor, fd: int, on_line, on_eof, name: str = "pipe"):
        self.reactor = reactor
        self.fd = fd
        self.on_line = on_line
        self.on_eof = on_eof
        self.name = name
        self._buffer = b""
        self._closed = False
        os.set_blocking(fd, False)
        reactor.addReader(self)

    def fileno(self) -> int:
        return -1 if self._closed else self.fd

    def logPrefix(self) -> str:
        return self.name

    def doRead(self):
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:
            self._finish()
            return None
        self._buffer += data
        if b"\n" not in data:
            if len(self._buffer) > MAX_LINE:
                self._buffer = b""  # a runaway line: drop it rather than grow
            return None
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = {"t": "text", "text": line.decode(errors="replace")}
            try:
                self.on_line(message)
            except Exception:
                twisted_log.err(None, f"handling a line from {self.name}")
        return None

    def connectionLost(self, reason):
        self._finish()

    def _finish(self):
        if self._closed:
            return
        self.reactor.removeReader(self)
        self._closed = True
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.on_eof()

    def close(self) -> None:
        if not self._closed:
            self.reactor.removeReader(self)
            self._closed = True
            try:
                os.close(self.fd)
            except OSError:
                pass


def write_line(fd: int, message: dict) -> bool:
    """Blocking write of one JSON line; False if the reader has gone."""
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    view = memoryview(data)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except (BrokenPipeError, OSError):
        return False
    return True
