"""Hole punching over TCP, sans I/O (docs/reachability.md, "Hole punching").

Two nodes behind NATs that talk through a relay try to open a direct TCP
connection between them, coordinated over the relayed connection in the
spirit of libp2p's DCUtR:

    initiator (dialled through the relay)            responder
      PUNCH_CONNECT(my addresses, my NAT)      ->
                                               <-    answer: its addresses, its NAT
      (the round trip is measured)
      PUNCH_SYNC(attempt)                      ->    dials at once
      dials RTT/2 later                              (TLS server)
      (TLS client)

Both dial from their own listening port, so a port-preserving NAT gives the
outgoing SYN the outside port peers saw: each SYN opens its own NAT for the
other's, and the two meet as a TCP simultaneous open. flud's TLS and HELLO
then run over it, each side expecting the other's node id; the pair moves
from the relayed connection to the direct one.

This module holds what needs no socket: the NAT's behaviour from what peers
observed, the check of announced addresses (a node dials only where its
peer could have been seen: never loopback, never its own or a known third
party's address, only the peer's listening port), the initiator's attempts
and round trip (Punch), the responder's bounds (PunchGate) and the record
of each peer's outcome (PunchBook). flud/node/puncher.py and flud/protocol/punch_initiator.py are the glue.
"""
import ipaddress
from collections import OrderedDict

from flud.protocol.errors import ErrorCode, RemoteError

# How a node's NAT maps ports, from its dial-back answers (local source
# port against the port the peer observed).
NAT_UNKNOWN = 0
NAT_PRESERVING = 1      # cone-like: the outside port is the inside one
NAT_CHANGING = 2        # symmetric: a new outside port per connection
NAT_NAMES = {NAT_UNKNOWN: "unknown", NAT_PRESERVING: "port-preserving",
             NAT_CHANGING: "port-changing"}

MAX_ATTEMPTS = 3             # whole CONNECT/SYNC exchanges per punch
DIAL_TIMEOUT = 5.0           # one attempt's dial (TCP, then TLS and HELLO)
ANSWER_TIMEOUT = 10.0        # PUNCH_CONNECT / PUNCH_SYNC answer
MAX_SYNC_DELAY = 2.0         # half a round trip, capped (a relay that stalls)
RETRY_AFTER = 600.0          # a pair that could not punch is not tried again before
SYNC_WINDOW = 30.0           # a SYNC must follow its CONNECT within this
PER_PEER_WINDOW = 60.0       # the responder takes at most ...
PER_PEER_CONNECTS = MAX_ATTEMPTS + 1   # ... this many CONNECTs from one peer in it
MAX_CONCURRENT = 8           # punch dials in flight at once (both roles)
MAX_TRACKED = 1024           # peers the gate and the book remember
MAX_PORT_OBSERVATIONS = 16


def nat_behaviour(observations) -> int:
    """NAT_* from [(local port, observed port)] of connections this node
    made: most kept their port: preserving; two or more and none kept:
    changing; else unknown."""
    observations = list(observations)[-MAX_PORT_OBSERVATIONS:]
    kept = sum(1 for local, seen in observations if local == seen)
    if observations and kept * 2 > len(observations):
        return NAT_PRESERVING
    if len(observations) >= 2 and kept == 0:
        return NAT_CHANGING
    return NAT_UNKNOWN


def may_punch(own_nat: int, peer_nat: int):
    """None if a punch between these NATs can work, else why not."""
    if own_nat == NAT_CHANGING and peer_nat == NAT_CHANGING:
        return "both NATs change ports (symmetric): no outside port can be predicted"
    return None


def plain(host: str):
    """The address as an ipaddress object (v4-mapped v6 as v4), or None."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# A client listens nowhere: it punches from an ephemeral port, never below this.
LOWEST_CLIENT_PORT = 1024


def check_announced(addresses, peer_port: int, own_hosts=(), third_party_hosts=()) -> list:
    """The announced (host, port) this node may dial to punch: hosts that
    are unicast IP addresses (not loopback, unspecified, multicast,
    link-local or broadcast), not this node's own, not any other node's it
    knows (a punch aimed at a third party), on the peer's listening port
    (a punch dials from it: a peer is seen there or not at all; peer_port 0,
    a client: an ephemeral port). Raises PUNCH_ADDRESS when none is left."""
    own = {plain(h) for h in own_hosts} - {None}
    others = {plain(h) for h in third_party_hosts} - {None}
    accepted, why = [], "no address"
    for host, port in addresses:
        address = plain(host)
        if address is None:
            why = f"{host!r} is not an IP address"
        elif (address.is_loopback or address.is_unspecified or address.is_multicast
              or address.is_link_local or address == ipaddress.ip_address("255.255.255.255")):
            why = f"{host} is not an address a peer can be seen at"
        elif address in own:
            why = f"{host} is this node's own address"
        elif address in others:
            why = f"{host} is another node's address: a punch dials only its peer"
        elif peer_port and port != peer_port:
            why = f"port {port} is not the peer's listening port {peer_port}"
        elif not peer_port and port < LOWEST_CLIENT_PORT:
            why = f"port {port} is not an ephemeral port a client punches from"
        else:
            if (str(address), port) not in accepted:
                accepted.append((str(address), port))
            continue
    if not accepted:
        raise RemoteError(ErrorCode.PUNCH_ADDRESS, f"no address to punch to: {why}")
    return accepted


class Punch:
    """The initiator's side of one punch with one peer: up to MAX_ATTEMPTS
    exchanges, the round trip of the last, and how it ended."""

    def __init__(self, peer_id: bytes, max_attempts: int = MAX_ATTEMPTS):
        self.peer_id = peer_id
        self.max_attempts = max_attempts
        self.attempt = 0
        self.sent_at = None
        self.rtt = None
        self.addresses = []
        self.outcome = None        # "punched" or the reason it is relayed
        self.failures = []

    def connect_sent(self, now: float) -> None:
        self.attempt += 1
        self.sent_at = now

    def answered(self, now: float, addresses) -> float:
        """The CONNECT answer came: returns the delay before this side
        dials once it sent SYNC (half the round trip, capped)."""
        self.rtt = max(0.0, now - self.sent_at)
        self.addresses = list(addresses)
        return min(self.rtt / 2, MAX_SYNC_DELAY)

    def failed(self, reason: str) -> bool:
        """An attempt failed; True if another may be made."""
        self.failures.append(reason)
        if self.attempt < self.max_attempts:
            return True
        self.outcome = f"{self.attempt} attempts failed: {reason}"
        return False

    def give_up(self, reason: str) -> None:
        self.outcome = reason

    def succeeded(self) -> None:
        self.outcome = "punched"


class PunchGate:
    """The responder's bounds. A CONNECT is taken from a peer at most
    PER_PEER_CONNECTS times per PER_PEER_WINDOW; a SYNC only within
    SYNC_WINDOW of an agreed CONNECT, and at most one per agreed attempt;
    at most MAX_CONCURRENT dials at once (for both roles: begin/end); a
    table of at most MAX_TRACKED peers. Pure: the caller passes the time."""

    def __init__(self, max_tracked: int = MAX_TRACKED):
        self.max_tracked = max_tracked
        self._connects = OrderedDict()   # peer id -> [window start, CONNECTs in it]
        self._agreed = {}                # peer id -> (addresses, when, syncs left)
        self.in_flight = 0
        self.counters = {"connects": 0, "syncs": 0, "rate_limited": 0, "refused": 0,
                         "bad_address": 0}

    def connect(self, peer_id: bytes, now: float) -> None:
        """A CONNECT arrived: RATE_LIMITED past the peer's allowance."""
        window = self._connects.get(peer_id)
        if window is None or now - window[0] >= PER_PEER_WINDOW:
            if window is None and len(self._connects) >= self.max_tracked:
                self._forget_old(now)
                if len(self._connects) >= self.max_tracked:
                    self.counters["rate_limited"] += 1
                    raise RemoteError(ErrorCode.RATE_LIMITED,
                                      "too many peers punching at once; try later")
            window = self._connects[peer_id] = [now, 0]
        if window[1] >= PER_PEER_CONNECTS:
            self.counters["rate_limited"] += 1
            raise RemoteError(ErrorCode.RATE_LIMITED,
                              f"over {PER_PEER_CONNECTS} punches in {PER_PEER_WINDOW:.0f} s")
        window[1] += 1
        self._connects.move_to_end(peer_id)
        self.counters["connects"] += 1

    def agree(self, peer_id: bytes, addresses, now: float) -> None:
        """The CONNECT's addresses passed their check: a SYNC may follow."""
        self._agreed[peer_id] = (list(addresses), now, 1)
        while len(self._agreed) > self.max_tracked:
            self._agreed.pop(next(iter(self._agreed)))

    def sync(self, peer_id: bytes, now: float) -> list:
        """A SYNC arrived: the addresses to dial, or PUNCH_REFUSED /
        RATE_LIMITED."""
        agreed = self._agreed.get(peer_id)
        if agreed is None or now - agreed[1] > SYNC_WINDOW or agreed[2] <= 0:
            self.counters["refused"] += 1
            raise RemoteError(ErrorCode.PUNCH_REFUSED,
                              "no punch agreed: a PUNCH_SYNC follows a PUNCH_CONNECT, once")
        if not self.begin():
            self.counters["rate_limited"] += 1
            raise RemoteError(ErrorCode.RATE_LIMITED, "too many punches at once; try later")
        # the caller owns the dial slot begun here: end() when its dial ends
        self._agreed[peer_id] = (agreed[0], agreed[1], agreed[2] - 1)
        self.counters["syncs"] += 1
        return agreed[0]

    def begin(self) -> bool:
        if self.in_flight >= MAX_CONCURRENT:
            return False
        self.in_flight += 1
        return True

    def end(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def _forget_old(self, now: float) -> None:
        for peer in [p for p, w in self._connects.items() if now - w[0] >= PER_PEER_WINDOW]:
            del self._connects[peer]


class PunchBook:
    """Each peer's last outcome (punched, or why it stays relayed), and
    when a peer that could not be punched may be tried again."""

    def __init__(self, max_tracked: int = MAX_TRACKED):
        self.max_tracked = max_tracked
        self.peers = OrderedDict()     # peer id -> (outcome, when, role, attempts, rtt)
        self.counters = {"started": 0, "punched": 0, "failed": 0, "skipped": 0}

    def record(self, peer_id: bytes, outcome: str, now: float, role: str,
               attempts: int = 0, rtt=None) -> None:
        self.peers[peer_id] = (outcome, now, role, attempts, rtt)
        self.peers.move_to_end(peer_id)
        while len(self.peers) > self.max_tracked:
            self.peers.popitem(last=False)
        if outcome == "punched":
            self.counters["punched"] += 1
        elif attempts:
            self.counters["failed"] += 1
        else:
            self.counters["skipped"] += 1

    def may_try(self, peer_id: bytes, now: float) -> bool:
        held = self.peers.get(peer_id)
        return held is None or held[0] == "punched" or now - held[1] >= RETRY_AFTER

    def summary(self, limit: int = 32) -> dict:
        """Counters and the latest `limit` peers' outcomes (STATS is bounded)."""
        last = list(self.peers.items())[-limit:]
        return dict(self.counters, peers={
            peer.hex(): {"outcome": o[:160], "role": role, "attempts": a,
                         "rtt_ms": None if rtt is None else round(rtt * 1000, 1)}
            for peer, (o, _, role, a, rtt) in last})
