"""The door of a node's listening port: connections that have not said HELLO.

Until its HELLO is verified a connection is nobody's: it costs the node its
TLS state and Python objects (~24 KB each after the handshake) and has proven
nothing. 2,000 of them at once, each silent until the handshake timeout
closed it, took a node from 30 to 77 MB of RSS, and it stayed there. So a
node holds at most MAX_UNAUTHENTICATED of them at once: past that, a new
connection is closed as it is accepted, before any TLS (Twisted closes the
socket when buildProtocol returns None), and one that proves itself frees
its place.

What such a burst left in glibc's heap stays resident once the connections
are gone (free holes below live memory are not the heap's top), so once a
burst has drained the node trims its heap (flud.lean.trim_heap). Measured,
the same 2,000: +6.4 MB at the peak, +0.8 MB once they had gone.
"""
import logging

from flud.protocol.connection import ConnectionFactory

log = logging.getLogger("flud.gate")

# Connections before HELLO held at once. An honest one says HELLO one round
# trip after its handshake, so the ones waiting at any moment are those that
# connected in the same instant: at most the whole network joining through
# one node at once (a 50-node testnet starts 49 dials to its first node) and
# every client starting a backup together. 128 covers that twice over and
# bounds what strangers hold to ~3 MB.
MAX_UNAUTHENTICATED = 128
# A drained burst of at least this many (or any refusal) trims the heap; an
# honest connection or two coming and going does not (a trim walks the heap).
TRIM_AFTER_BURST = 32
# The trim runs this long after the last one settled: the connections that
# failed are torn down by the reactor a turn later, and a burst that comes in
# waves is trimmed once.
TRIM_DELAY = 1.0


class GatedConnectionFactory(ConnectionFactory):
    """connection.ConnectionFactory holding at most `limit` connections before HELLO."""

    def __init__(self, local, handler, clock, limit: int = MAX_UNAUTHENTICATED,
                 trim=None):
        super().__init__(local, handler, clock)
        self.limit = limit
        if trim is None:
            from flud.lean import trim_heap as trim
        self._trim = trim
        self._waiting = set()   # accepted, HELLO not verified yet
        self._burst = 0         # most waiting at once since the last trim
        self._refused_since_trim = 0
        self._trim_call = None
        self.refused = 0        # connections closed at the door, ever

    @property
    def unauthenticated(self) -> int:
        return len(self._waiting)

    def buildProtocol(self, addr):
        if len(self._waiting) >= self.limit:
            if not self._refused_since_trim:
                log.warning("%d connections have not said HELLO yet; closing new ones "
                            "until they do or go", len(self._waiting))
            self.refused += 1
            self._refused_since_trim += 1
            return None
        conn = super().buildProtocol(addr)
        self._waiting.add(conn)
        self._burst = max(self._burst, len(self._waiting))
        # `ready` fires once: at a verified HELLO, or failed when the
        # connection goes (or fails) before one.
        conn.ready.addBoth(self._settled, conn)
        return conn

    def _settled(self, result, conn):
        self._waiting.discard(conn)
        if not self._waiting and (self._burst >= TRIM_AFTER_BURST or self._refused_since_trim):
            self._schedule_trim()
        return result  # passed on untouched: whoever else waits sees it

    def _schedule_trim(self):
        if self._trim_call is not None and self._trim_call.active():
            self._trim_call.reset(TRIM_DELAY)
            return
        self._trim_call = self.clock.callLater(TRIM_DELAY, self._trim_now)

    def _trim_now(self):
        self._trim_call = None
        if self._waiting:  # another burst began: trim once it has drained
            return
        if self._refused_since_trim:
            log.info("%d connections were closed before HELLO since the last trim",
                     self._refused_since_trim)
        self._burst = len(self._waiting)
        self._refused_since_trim = 0
        self._trim()

    def stop(self):
        if self._trim_call is not None and self._trim_call.active():
            self._trim_call.cancel()
        self._trim_call = None
