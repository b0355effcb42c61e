"""Asking the home router for a port: UPnP-IGD (through `miniupnpc`), and
NAT-PMP (RFC 6886, flud/node/natpmp.py) where UPnP finds no gateway.

A node judged private (flud/node/dial_back.py) asks the gateway to forward
its listening port to it, for LEASE seconds, renewed at half of what the
gateway granted. A first attempt asks both ways at once which gateway
answers (discovery only: nothing is mapped by the loser) and maps with the
first found; a renewal asks the method that holds the mapping, and
discovers again where it fails. A mapping is only a candidate: the node
publishes the outside address once peers have dialled it back there, like
any other.

UPnP-IGD: `miniupnpc` blocks (SSDP discovery waits DISCOVER_MS, then HTTP
to the gateway), so every call runs on a worker thread and only the outcome
comes back to the reactor; it is imported on the worker when a node first
needs a mapping: a node that never does (a public one, a testnet) does not
load it. NAT-PMP: a few UDP datagrams to the default gateway, sent from the
reactor without blocking (flud/node/natpmp_client.py).

The mapping must keep the listening port outside (external = internal):
peers dial a node back on the port it listens on, so a mapping elsewhere
could never be confirmed; a gateway that offers another port is refused.

Where no method maps, the node says so once and tries again every
RETRY_AFTER. Tested against fakes with each library's interface
(tests/unit/node/test_port_mapping.py) and for real against miniupnpd in
the network lab (tests/integration/test_netlab_portmap.py).
"""
import ipaddress
import logging
from dataclasses import dataclass

from twisted.internet import defer

from flud.errors import FludError
from flud.node import natpmp

log = logging.getLogger("flud.portmap")

LEASE = 3600
RETRY_AFTER = 600.0
DISCOVER_MS = 1000
DESCRIPTION = "flud node"
MIN_RENEW = 1.0
ROUTE_TABLE = "/proc/net/route"
CARRIER_GRADE = "100.64.0.0/10"   # RFC 6598 (not is_private)


class MappingFailed(FludError):
    """No port mapping: no gateway answered, or it refused."""

    code = "PORT_MAPPING_FAILED"


@dataclass(frozen=True)
class Mapped:
    host: str           # the gateway's external address
    port: int           # the external port (the listening port)
    lifetime: int       # seconds the gateway granted


def usable_address(text) -> str:
    """The gateway's external address as given, or MappingFailed where it
    has none to give (an empty answer, 0.0.0.0: no WAN address yet)."""
    try:
        address = ipaddress.ip_address(text or "")
    except ValueError:
        raise MappingFailed(f"the gateway gave no usable external address ({text!r})") from None
    if address.is_unspecified:
        raise MappingFailed("the gateway has no external address (0.0.0.0)")
    return str(address)


def looks_natted(hosts) -> bool:
    """Does a node with these own addresses probably sit behind a NAT (an
    IPv4 address of a private range: RFC 1918, the carrier-grade 100.64/10,
    the lab's 198.18/15)? Such a node asks for a mapping at once, so that
    its first reachability round can already confirm it, instead of after
    a round has judged it private."""
    carrier_grade = ipaddress.ip_network(CARRIER_GRADE)   # ipaddress loads lazily in a node
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue
        if address.version == 4 and not address.is_loopback and not address.is_link_local \
                and (address.is_private or address in carrier_grade):
            return True
    return False


def default_gateway_client():
    try:
        import miniupnpc
    except ImportError:
        raise MappingFailed("miniupnpc is not installed: no port mapping") from None
    return miniupnpc.UPnP()


class UpnpIgd:
    """UPnP-IGD through a miniupnpc.UPnP-like client, on a worker thread."""

    name = "upnp-igd"

    def __init__(self, run_in_thread, client_factory=default_gateway_client):
        self.run_in_thread = run_in_thread
        self.client_factory = client_factory
        self._client = None

    def discover(self) -> defer.Deferred:
        """Fires (with self) once a gateway answered; asks it nothing."""
        return self.run_in_thread(self._discover).addCallback(lambda _: self)

    def _discover(self):
        """On a worker thread: SSDP, then the gateway's description."""
        client = self.client_factory()
        client.discoverdelay = DISCOVER_MS
        try:
            found = client.discover()
        except Exception:   # miniupnpc 2.3 raises a bare Exception ("Success") for none
            found = 0
        if not found:
            raise MappingFailed("no UPnP gateway answered")
        try:
            client.selectigd()
        except Exception as err:   # a bare Exception again
            raise MappingFailed(f"no usable UPnP gateway ({err})") from None
        self._client = client
        return client

    def map(self, port: int, lease: int) -> defer.Deferred:
        return self.run_in_thread(self._map, port, lease)

    def _map(self, port: int, lease: int) -> Mapped:
        """On a worker thread: discover the gateway (once) and map the port."""
        client = self._client or self._discover()
        try:
            external = client.externalipaddress()
            done = client.addportmapping(port, "TCP", client.lanaddr, port, DESCRIPTION, "",
                                         lease)
        except Exception as err:
            self._client = None       # discover again next time: the gateway may have changed
            raise MappingFailed(f"the UPnP gateway refused to map port {port} ({err})") from None
        if not done:
            raise MappingFailed(f"the UPnP gateway refused to map port {port}")
        return Mapped(usable_address(external), port, lease)

    def unmap(self, port: int) -> defer.Deferred:
        client = self._client
        if client is None:
            return defer.succeed(None)
        return self.run_in_thread(client.deleteportmapping, port, "TCP")

    def cancel(self) -> None:
        """A discovery on a thread cannot be stopped; its answer is unused."""


def read_default_gateway():
    try:
        with open(ROUTE_TABLE) as f:
            return natpmp.default_gateway(f.read())
    except OSError:
        return None


class NatPmp:
    """NAT-PMP to the IPv4 default gateway, from the reactor."""

    name = "nat-pmp"

    def __init__(self, reactor, find_gateway=read_default_gateway, client_factory=None):
        self.reactor = reactor
        self.find_gateway = find_gateway
        if client_factory is None:
            from flud.node.natpmp_client import NatPmpClient as client_factory
        self.client_factory = client_factory
        self.restarts = 0         # times the gateway was seen to have lost its state
        self._client = None
        self._epoch = None        # (gateway's epoch, our time) at the last answer

    def _gateway_client(self):
        gateway = self.find_gateway()
        if gateway is None:
            raise MappingFailed("no IPv4 default gateway to ask NAT-PMP")
        if self._client is None or self._client.gateway != gateway:
            self._client = self.client_factory(self.reactor, gateway)
        return self._client

    @defer.inlineCallbacks
    def discover(self):
        """Fires (with self) once the gateway told its external address."""
        client = self._gateway_client()
        try:
            yield client.external_address()
        except natpmp.NatPmpError as err:
            raise MappingFailed(f"NAT-PMP at {client.gateway}: {err}") from None
        return self

    @defer.inlineCallbacks
    def map(self, port: int, lease: int):
        client = self._gateway_client()
        gateway = client.gateway
        try:
            address = yield client.external_address()
            mapping = yield client.map_tcp(port, port, lease)
        except natpmp.NatPmpError as err:
            raise MappingFailed(f"NAT-PMP at {gateway}: {err}") from None
        self._note_epoch(mapping.epoch)
        if mapping.external_port != port:
            client.delete_tcp(port).addErrback(lambda f: None)
            raise MappingFailed(f"NAT-PMP at {gateway} offered port {mapping.external_port}, "
                                f"not {port} (peers dial back the listening port)")
        return Mapped(usable_address(address.address), mapping.external_port, mapping.lifetime)

    def _note_epoch(self, epoch: int) -> None:
        now = self.reactor.seconds()
        if self._epoch is not None and natpmp.gateway_restarted(*self._epoch, epoch, now):
            self.restarts += 1
            log.info("the NAT-PMP gateway restarted (epoch %d): mapping made again", epoch)
        self._epoch = (epoch, now)

    def unmap(self, port: int) -> defer.Deferred:
        if self._client is None:
            return defer.succeed(None)
        return self._client.delete_tcp(port)

    def cancel(self) -> None:
        """Stop waiting for the gateway (a discovery another method won)."""
        if self._client is not None:
            self._client.close()


class PortMapper:
    def __init__(self, reactor, run_in_thread, port: int, on_mapped, lease: int = LEASE,
                 client_factory=default_gateway_client, methods=None):
        """on_mapped(external_host, external_port): a mapping was made (or
        renewed onto another address). methods: the ways to ask, in order
        (UPnP-IGD through client_factory's clients, then NAT-PMP)."""
        self.reactor = reactor
        self.port = port
        self.on_mapped = on_mapped
        self.lease = lease
        self.methods = methods if methods is not None else [
            UpnpIgd(run_in_thread, client_factory), NatPmp(reactor)]
        self.mapped = None          # (external host, port) while a mapping is held
        self.holder = None          # the method that holds it
        self.failures = 0
        self.last_error = ""
        self.started_at = None
        self.mapped_after = None    # seconds from start() to the first mapping
        self._call = None

    def start(self) -> None:
        if self._call is None:
            if self.started_at is None:
                self.started_at = self.reactor.seconds()
            self._call = self.reactor.callLater(0, self._attempt)

    def stop(self) -> defer.Deferred:
        """Stop renewing and ask the gateway to drop the mapping; fires when
        it answered (or gave up: best effort, the lease ends it anyway)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self.mapped is None or self.holder is None:
            return defer.succeed(None)
        holder, self.mapped, self.holder = self.holder, None, None
        try:
            d = holder.unmap(self.port)
        except Exception:
            return defer.succeed(None)
        return d.addErrback(lambda f: None)

    def _attempt(self) -> None:
        """Renew with the holder; failing that (or with none), find which
        gateways answer, all at once, and map with the first that did."""
        if self.holder is not None:
            holder = self.holder
            d = self._map_with([holder], [])
            d.addErrback(lambda f: self._discover_and_map(
                [f"{holder.name}: {f.getErrorMessage()}"]))
        else:
            d = self._discover_and_map([])
        d.addCallbacks(self._mapped, self._failed)

    def _discover_and_map(self, errors) -> defer.Deferred:
        """Race the methods' discoveries (none asks the gateway for
        anything: a loser leaves nothing behind): UPnP's SSDP waits
        seconds for nothing where the router speaks only NAT-PMP, which
        answers in milliseconds, and NAT-PMP waits two minutes where the
        router does not speak it. The first to find its gateway maps; if
        it cannot, the others try in order."""
        done = defer.Deferred()
        pending = list(self.methods)

        def found(method):
            if done.called:
                return
            for other in pending:
                if other is not method:
                    other.cancel()
            rest = [m for m in self.methods if m is not method]
            self._map_with([method] + rest, errors).chainDeferred(done)

        def lost(failure, method):
            if done.called:
                return
            errors.append(f"{method.name}: {failure.getErrorMessage()}")
            pending.remove(method)
            if not pending:
                done.errback(MappingFailed("; ".join(errors)))

        if not pending:
            return defer.fail(MappingFailed("no way to map a port"))
        for method in list(pending):
            if done.called:     # found already (a discovery that answered at once)
                break
            try:
                d = method.discover()
            except Exception as err:
                d = defer.fail(err)
            d.addCallbacks(found, lost, errbackArgs=(method,))
        return done

    def _map_with(self, methods, errors) -> defer.Deferred:
        """Each method in turn until one maps: (method, Mapped)."""
        if not methods:
            return defer.fail(MappingFailed("; ".join(errors) or "no way to map a port"))
        method, rest = methods[0], methods[1:]
        try:
            d = method.map(self.port, self.lease)
        except Exception as err:
            d = defer.fail(err)

        def failed(failure):
            errors.append(f"{method.name}: {failure.getErrorMessage()}")
            return self._map_with(rest, errors)
        d.addCallbacks(lambda done: (method, done), failed)
        return d

    def _mapped(self, outcome) -> None:
        method, done = outcome
        if self._call is None:     # stopped while the gateway mapped: drop it again
            try:
                method.unmap(self.port).addErrback(lambda f: None)
            except Exception:
                pass
            return
        where = (done.host, done.port)
        changed = where != self.mapped
        self.mapped, self.holder, self.failures, self.last_error = where, method, 0, ""
        if self.mapped_after is None:
            self.mapped_after = self.reactor.seconds() - self.started_at
        if changed:
            log.info("port %d mapped at %s:%d by %s for %d s", self.port, where[0], where[1],
                     method.name, done.lifetime)
            self.on_mapped(*where)
        self._call = self.reactor.callLater(max(MIN_RENEW, done.lifetime / 2), self._attempt)

    def _failed(self, failure) -> None:
        if self._call is None:
            return
        self.failures += 1
        self.last_error = failure.getErrorMessage() or type(failure.value).__name__
        if self.failures == 1:
            log.info("no port mapping: %s (trying again every %d s)", self.last_error,
                     RETRY_AFTER)
        self.mapped, self.holder = None, None
        self._call = self.reactor.callLater(RETRY_AFTER, self._attempt)

    def summary(self) -> dict:
        return {"mapped": f"{self.mapped[0]}:{self.mapped[1]}" if self.mapped else None,
                "method": self.holder.name if self.holder else None,
                "mapped_after": (round(self.mapped_after, 3)
                                 if self.mapped_after is not None else None),
                "failures": self.failures, "last_error": self.last_error}
