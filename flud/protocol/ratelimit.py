"""Rate limits: a token bucket (sans-I/O) and the throttle that holds
connections back while the bucket is in debt (its timer: the clock passed in).

The bucket fills at `rate` bytes a second up to `burst`. Sending charges it
after the fact, and it may go into debt: a connection writes one TLS piece,
charges it, and is held back until the debt is paid, so the long-run rate is
exact and what overshoots is one piece per connection. Every connection of a
party shares one bucket per direction: the limit is the client's, not each
connection's.
"""

# One second's worth, at least what a connection writes or reads at once
# (a TLS piece, a socket read): a burst that large cannot starve a write.
MIN_BURST = 64 * 1024
# A debt this short (seconds) counts as paid: the timer's float arithmetic
# would otherwise re-arm it for a few nanoseconds, again and again.
SLACK = 1e-3


class TokenBucket:
    """Pure: the time is passed in. level < 0 is debt."""

    def __init__(self, rate: float, burst: float = None, now: float = 0.0):
        if rate <= 0:
            raise ValueError(f"a rate must be positive, got {rate!r}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate, MIN_BURST))
        self.level = self.burst
        self.stamp = now

    def _fill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def charge(self, nbytes: int, now: float) -> float:
        """Take nbytes that went (or came); returns the seconds to wait
        before the next bytes may (0 when none)."""
        self._fill(now)
        self.level -= nbytes
        return self.wait(now)

    def wait(self, now: float) -> float:
        self._fill(now)
        return 0.0 if self.level >= 0 else -self.level / self.rate


class Throttle:
    """One direction's limit for every connection of a party: charge() what
    went; a connection told to wait is called back (wake) once the bucket is
    out of debt. clock: anything with seconds() and callLater()."""

    def __init__(self, clock, rate: float, burst: float = None):
        self.clock = clock
        self.bucket = TokenBucket(rate, burst, clock.seconds())
        self._waiting = []   # wake callbacks, in the order they were held
        self._timer = None
        self.held = 0        # times a connection was held back (for tests, stats)

    @property
    def rate(self) -> float:
        return self.bucket.rate

    def set_rate(self, rate: float) -> None:
        """A new limit from now on (a bandwidth window began): the debt
        already run up is paid at the new rate."""
        if rate <= 0:
            raise ValueError(f"a rate must be positive, got {rate!r}")
        now = self.clock.seconds()
        self.bucket._fill(now)
        self.bucket.rate = float(rate)
        self.bucket.burst = float(max(rate, MIN_BURST))
        self.bucket.level = min(self.bucket.level, self.bucket.burst)
        if self._timer is not None and self._timer.active():   # re-armed at the new rate
            self._timer.cancel()
            self._timer = self.clock.callLater(self.bucket.wait(now), self._release)

    def charge(self, nbytes: int, wake) -> bool:
        """Count nbytes; True if the caller must hold back until wake()."""
        delay = self.bucket.charge(nbytes, self.clock.seconds())
        if delay <= 0:
            return False
        self.held += 1
        if wake not in self._waiting:
            self._waiting.append(wake)
        if self._timer is None:
            self._timer = self.clock.callLater(delay, self._release)
        return True

    def _release(self) -> None:
        self._timer = None
        delay = self.bucket.wait(self.clock.seconds())
        if delay > SLACK:  # charged again meanwhile (another connection's piece)
            self._timer = self.clock.callLater(delay, self._release)
            return
        waiting, self._waiting = self._waiting, []
        for wake in waiting:
            wake()

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._waiting = []
