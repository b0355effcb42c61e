"""Progress lines while work runs (files, bytes, rate, ETA) and warnings."""
import sys
import time

INTERVAL = 0.5


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Progress:
    def __init__(self, verb: str, stream=None, clock=time.monotonic, quiet=False):
        self.verb = verb
        self.stream = stream or sys.stderr
        self.clock = clock
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.files = self.total_files = 0
        self.bytes = self.total_bytes = 0
        self.warnings = 0
        self.on_warn = None   # called with each warning's text (the --json error lines)
        self.started = self._last = clock()

    def start(self, total_files: int, total_bytes: int) -> None:
        self.total_files, self.total_bytes = total_files, total_bytes
        self.started = self._last = self.clock()

    def file_done(self, size: int) -> None:
        self.files += 1
        self.bytes_done(size)

    def bytes_done(self, n: int) -> None:
        self.bytes += n
        now = self.clock()
        if now - self._last >= (INTERVAL if self.tty else 5 * INTERVAL):
            self._last = now
            self._show(now)

    def line(self, now=None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.bytes / elapsed
        left = self.total_bytes - self.bytes
        eta = f"{left / rate:.0f} s" if rate > 0 and left > 0 else "-"
        return (f"{self.verb}: {self.files}/{self.total_files} files, "
                f"{human_bytes(self.bytes)}/{human_bytes(self.total_bytes)}, "
                f"{human_bytes(rate)}/s, ETA {eta}")

    def _show(self, now) -> None:
        if self.quiet:
            return
        end = "\r" if self.tty else "\n"
        self.stream.write(self.line(now) + end)
        self.stream.flush()

    def warn(self, text: str) -> None:
        self.warnings += 1
        if self.on_warn is not None:
            self.on_warn(text)
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"warning: {text}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write(self.line() + "\n")
