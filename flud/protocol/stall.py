"""Peers that stall without closing: noticed in seconds, not minutes.

A SIGSTOPped or wedged peer keeps its TCP connection open: the kernel even
accepts a few MB of what we send, and nothing ever fails. What gives it away
is silence while it owes us something (an answer to a request sent whole,
or reading what our transport holds for it): StallWatch looks at every
connection a few times a second and calls `on_stall(conn, silence)` for one
that stayed silent past the deadline.

The deadline follows the network: STALL_FACTOR times the longest silence
that healthy connections showed recently before they made progress again
(a node that fsyncs an extent, a machine that is busy), never below
STALL_FLOOR nor above STALL_CEILING. A dial is held to the same deadline
(Network.peer): a stopped node completes TCP's handshake from its kernel's
backlog but never TLS's.

The connections are duck-typed (connection.Connection): `owes_us()`,
`last_progress` (clock seconds), `closed`. The clock is injected.
"""
import collections

from flud.protocol.errors import PeerStalled  # noqa: F401  (what on_stall reports; importable from here)

# Below this no connection is called stalled: a healthy node on a busy
# two-core machine running fifty of them has been seen quiet for ~0.5 s
# while it committed a stream.
STALL_FLOOR = 3.0
STALL_FACTOR = 4.0
# The old fixed stall timeout: no network makes us wait longer than this.
STALL_CEILING = 60.0
TICK = 0.25
# Healthy silences remembered for the deadline.
SAMPLES = 256


class StallWatch:
    def __init__(self, clock, connections, on_stall, floor: float = STALL_FLOOR,
                 factor: float = STALL_FACTOR, ceiling: float = STALL_CEILING,
                 tick: float = TICK):
        """connections(): the connections to watch now."""
        self.clock = clock
        self.connections = connections
        self.on_stall = on_stall
        self.floor, self.factor, self.ceiling, self.tick = floor, factor, ceiling, tick
        self._silences = collections.deque(maxlen=SAMPLES)
        # conn -> (its last_progress, the silence counted then) at the
        # previous tick, for connections that owed us progress then
        self._seen = {}
        self._last_tick = None
        self._reported = {}  # conn -> last_progress when reported: once per silence
        self._call = None

    def start(self) -> None:
        if self._call is None:
            self._call = self.clock.callLater(self.tick, self._tick)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._seen.clear()
        self._reported.clear()
        self._last_tick = None

    def deadline(self) -> float:
        longest = max(self._silences, default=0.0)
        return min(self.ceiling, max(self.floor, self.factor * longest))

    def _tick(self) -> None:
        self._call = None
        now = self.clock.seconds()
        # Silence is counted in time our own reactor was free to read: a tick
        # that comes late (the reactor was busy writing files, say) counts one
        # tick, so what our own work held up is never blamed on a peer.
        elapsed = self.tick if self._last_tick is None else now - self._last_tick
        counted = min(elapsed, 2 * self.tick)
        self._last_tick = now
        seen, self._seen = self._seen, {}
        stalled = []
        for conn in list(self.connections()):
            if conn.closed:
                continue
            last = conn.last_progress
            before = seen.get(conn)
            if before is not None and last > before[0]:
                # A silence that ended in progress: what healthy looks like
                # (as long as it was seen at a tick: within a tick of it).
                self._silences.append(before[1])
            if not conn.owes_us():
                continue
            if before is not None and last == before[0]:
                silence = before[1] + counted
            else:
                silence = min(now - last, counted)
            self._seen[conn] = (last, silence)
            if silence > self.deadline() and self._reported.get(conn) != last:
                stalled.append((conn, silence))
        self._reported = {conn: self._reported[conn] for conn in self._seen
                          if conn in self._reported}
        for conn, silence in stalled:
            self._seen.pop(conn, None)
            self._reported[conn] = conn.last_progress
            self.on_stall(conn, silence)
        self._call = self.clock.callLater(self.tick, self._tick)
