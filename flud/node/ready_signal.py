"""A node telling the launcher that forked it when it listens and when it
has joined the DHT: one JSON line each on a pipe the launcher reads
(flud/testnet/launch.py), instead of the launcher polling every node's
node.json and asking each over the wire for its STATS until its routing
table filled (200 TLS handshakes a round, on the two cores every node
needed for its own start).

A line is shorter than PIPE_BUF (4,096 bytes), so the lines of many nodes
writing to one pipe never interleave. Joined means what
flud/testnet/query.py's joined() means: the DHT join done and a routing
table of `want_contacts` (k = 20, or every other node of a smaller testnet).
The check runs on the node's own clock, reads two fields, and stops once
it has said so: nothing goes over the network.
"""
import json
import logging
import os

log = logging.getLogger("flud.node")

CHECK_INTERVAL = 0.05


class ReadySignal:
    def __init__(self, fd: int, index: int, want_contacts: int):
        self.fd = fd
        self.index = index
        self.want_contacts = want_contacts
        self._call = None

    def _say(self, event: str, **fields) -> None:
        line = json.dumps({"index": self.index, "event": event, **fields},
                          separators=(",", ":")).encode() + b"\n"
        try:
            os.write(self.fd, line)
        except OSError as err:          # the launcher went away: nothing to tell
            log.info("could not tell the launcher %s: %s", event, err)

    def listening(self, info: dict) -> None:
        """info: what node.json says (id, host, port, pid, home, start)."""
        self._say("listening", info=info)

    def watch(self, discovery, clock) -> None:
        """Say "joined" once discovery has joined with enough contacts."""
        def check():
            self._call = None
            if discovery.joined and len(discovery.table) >= self.want_contacts:
                self._say("joined", contacts=len(discovery.table))
                return
            self._call = clock.callLater(CHECK_INTERVAL, check)
        check()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
