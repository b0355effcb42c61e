"""Reachability, sans I/O: which of a node's addresses others can dial, and
the bounds on the dial-backs a node does for others (docs/reachability.md).

A node cannot tell from the inside whether it sits behind a NAT: it asks
peers (DIAL_BACK) to dial it at the address they see it connect from. The
Judge keeps the answers: an address that CONFIRMATIONS distinct peers
reached is confirmed; with none reached and FAILURES_FOR_PRIVATE peers that
could not, the node is private. Only confirmed addresses are published.

The DialBackLimiter bounds what one node does for others: one dial-back per
asker per PER_ADDRESS_INTERVAL, PER_ADDRESS per observed address in that
time, MAX_CONCURRENT at once, so a flood of DIAL_BACK requests costs a table
of at most MAX_TRACKED entries and a handful of sockets.
"""
import ipaddress

CONFIRMATIONS = 2          # peers (by address) that must reach an address
FAILURES_FOR_PRIVATE = 2   # peers that could not, none could
PER_ADDRESS_INTERVAL = 10.0
PER_ADDRESS = 8            # dial-backs per address per interval (askers behind one NAT)
MAX_CONCURRENT = 4
MAX_TRACKED = 4096

PUBLIC = "public"
PRIVATE = "private"
UNKNOWN = "unknown"


def plain_host(host: str) -> str:
    """An address as one spelling: '::ffff:198.18.1.2' (a v4 peer seen on
    a dual-stack socket) is '198.18.1.2'; v6 compressed; names unchanged."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.version == 6 and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


WILDCARDS = ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(plain_host(host)).is_loopback
    except ValueError:
        return host == "localhost"


def candidate_addresses(host: str, port: int, local_addresses=None) -> list:
    """The address hints a node listening on host:port starts with: host
    itself, or, listening on every address ('::' is dual-stack, '0.0.0.0'
    IPv4 only), each of this namespace's own addresses of those families
    (local_addresses(): flud.procfs's by default). Loopback where none."""
    from flud.protocol.node_record import Address
    if host not in WILDCARDS:
        return [Address.tcp(host, port)]
    if local_addresses is None:
        from flud.procfs import local_addresses
    found = [a for a in local_addresses() if host == "::" or ":" not in a]
    return [Address.tcp(a, port) for a in found] or [Address.tcp("127.0.0.1", port)]


class Judge:
    """Answers to this node's DIAL_BACKs, and the verdict they make."""

    def __init__(self, confirmations: int = CONFIRMATIONS,
                 failures_for_private: int = FAILURES_FOR_PRIVATE):
        self.confirmations = confirmations
        self.failures_for_private = failures_for_private
        self._reached = {}      # (host, port) -> {asker address}
        self._failed = {}       # (host, port) -> {asker address}
        self.observed = {}      # observed host -> asker addresses that saw it

    def record(self, asker: str, observed_host: str, port: int, reached: bool) -> None:
        """An answer: asker (the peer's address) saw us at observed_host and
        reached (or not) observed_host:port."""
        where = (plain_host(observed_host), port)
        self.observed.setdefault(where[0], set()).add(asker)
        (self._reached if reached else self._failed).setdefault(where, set()).add(asker)
        (self._failed if reached else self._reached).get(where, set()).discard(asker)

    def confirmed(self) -> list:
        """(host, port) that enough distinct peers reached, sorted v4 first."""
        good = [where for where, askers in self._reached.items()
                if len(askers) >= self.confirmations]
        return sorted(good, key=lambda w: (":" in w[0], w))

    def verdict(self) -> str:
        if self.confirmed():
            return PUBLIC
        failed = set().union(*self._failed.values()) if self._failed else set()
        reached = set().union(*self._reached.values()) if self._reached else set()
        if len(failed) >= self.failures_for_private and not reached:
            return PRIVATE
        return UNKNOWN

    def reset(self) -> None:
        """Forget every answer (a new round after the network changed)."""
        self._reached.clear()
        self._failed.clear()
        self.observed.clear()

    def summary(self) -> dict:
        return {"verdict": self.verdict(),
                "confirmed": [f"{h}:{p}" if ":" not in h else f"[{h}]:{p}"
                              for h, p in self.confirmed()],
                "observed": sorted(self.observed),
                "reached_by": sum(len(a) for a in self._reached.values()),
                "failed_from": sum(len(a) for a in self._failed.values())}


class DialBackLimiter:
    """May this node dial back `asker` seen at `host` now? Each asker at
    most once per `interval`, each address (many askers behind one NAT, or
    one host making keys) at most `per_address` times per interval, and
    `max_concurrent` dials at once. Pure: the caller passes the time and
    says when a dial ends."""

    def __init__(self, interval: float = PER_ADDRESS_INTERVAL, per_address: int = PER_ADDRESS,
                 max_concurrent: int = MAX_CONCURRENT, max_tracked: int = MAX_TRACKED):
        self.interval = interval
        self.per_address = per_address
        self.max_concurrent = max_concurrent
        self.max_tracked = max_tracked
        self._askers = {}        # (host, asker) -> when its last dial-back began
        self._hosts = {}         # host -> [window start, dials in it]
        self.in_flight = 0

    def allow(self, host: str, asker: bytes, now: float) -> bool:
        if self.in_flight >= self.max_concurrent:
            return False
        last = self._askers.get((host, asker))
        if last is not None and now - last < self.interval:
            return False
        window = self._hosts.get(host)
        if window is not None and now - window[0] < self.interval and window[1] >= self.per_address:
            return False
        if len(self._askers) >= self.max_tracked:
            self._forget_old(now)
            if len(self._askers) >= self.max_tracked:
                return False
        self._askers[(host, asker)] = now
        if window is None or now - window[0] >= self.interval:
            self._hosts[host] = [now, 1]
        else:
            window[1] += 1
        self.in_flight += 1
        return True

    def done(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def _forget_old(self, now: float) -> None:
        for key in [k for k, t in self._askers.items() if now - t >= self.interval]:
            del self._askers[key]
        for host in [h for h, w in self._hosts.items() if now - w[0] >= self.interval]:
            del self._hosts[host]
