"""Asking the home router for a port (UPnP-IGD, through `miniupnpc`).

A node judged private (flud/node/dial_back.py) asks the gateway to forward
its listening port to it, for LEASE seconds, renewed at half of that. The
library blocks (SSDP discovery waits DISCOVER_MS, then HTTP to the
gateway), so every call runs on a worker thread and only the outcome comes
back to the reactor. A mapping is only a candidate: the node publishes the
outside address once peers have dialled it back there, like any other.

`miniupnpc` is imported on the worker, when a node first needs a mapping:
a node that never does (a public one, a testnet) does not load it. Where it
is missing or no gateway answers, the node says so once and tries again
every RETRY_AFTER.

The lab cannot run miniupnpd for this: miniupnpd refuses to map on a WAN
address in 198.18.0.0/15 (it counts it reserved), the only range the lab
may use. So the glue here is tested against a fake with miniupnpc.UPnP's
interface (tests/unit/node/test_port_mapping.py).
"""
import logging

from flud.errors import FludError

log = logging.getLogger("flud.portmap")

LEASE = 3600
RETRY_AFTER = 600.0
DISCOVER_MS = 1000
DESCRIPTION = "flud node"


class MappingFailed(FludError):
    """No port mapping: no gateway answered, or it refused."""

    code = "PORT_MAPPING_FAILED"


def default_gateway_client():
    try:
        import miniupnpc
    except ImportError:
        raise MappingFailed("miniupnpc is not installed: no port mapping") from None
    return miniupnpc.UPnP()


class PortMapper:
    def __init__(self, reactor, run_in_thread, port: int, on_mapped, lease: int = LEASE,
                 client_factory=default_gateway_client):
        """on_mapped(external_host, external_port): a mapping was made (or
        renewed onto another address)."""
        self.reactor = reactor
        self.run_in_thread = run_in_thread
        self.port = port
        self.on_mapped = on_mapped
        self.lease = lease
        self.client_factory = client_factory
        self.mapped = None          # (external host, port) while a mapping is held
        self.failures = 0
        self.last_error = ""
        self._call = None
        self._client = None

    def start(self) -> None:
        if self._call is None:
            self._call = self.reactor.callLater(0, self._attempt)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self.mapped is not None and self._client is not None:
            client, self.mapped = self._client, None
            d = self.run_in_thread(client.deleteportmapping, self.port, "TCP")
            d.addErrback(lambda f: None)   # best effort: the lease ends it anyway

    def _attempt(self) -> None:
        d = self.run_in_thread(self._map)
        d.addCallbacks(self._mapped, self._failed)

    def _map(self):
        """On a worker thread: discover the gateway (once) and map the port."""
        client = self._client
        if client is None:
            client = self.client_factory()
            client.discoverdelay = DISCOVER_MS
            if not client.discover():
                raise MappingFailed("no UPnP gateway answered")
            try:
                client.selectigd()
            except Exception as err:   # miniupnpc raises a bare Exception (even "Success")
                raise MappingFailed(f"no usable UPnP gateway ({err})") from None
            self._client = client
        external = client.externalipaddress()
        if not client.addportmapping(self.port, "TCP", client.lanaddr, self.port,
                                     DESCRIPTION, "", self.lease):
            raise MappingFailed(f"the gateway refused to map port {self.port}")
        return external, self.port

    def _mapped(self, where) -> None:
        if self._call is None:
            return
        changed = where != self.mapped
        self.mapped, self.failures, self.last_error = where, 0, ""
        if changed:
            log.info("port %d mapped at %s:%d for %d s", self.port, where[0], where[1], self.lease)
            self.on_mapped(*where)
        self._call = self.reactor.callLater(self.lease / 2, self._attempt)

    def _failed(self, failure) -> None:
        if self._call is None:
            return
        self.failures += 1
        self._client = None if self.mapped is None else self._client
        self.last_error = str(failure.value) or type(failure.value).__name__
        if self.failures == 1:
            log.info("no port mapping: %s (trying again every %d s)", self.last_error,
                     RETRY_AFTER)
        self.mapped = None
        self._call = self.reactor.callLater(RETRY_AFTER, self._attempt)

    def summary(self) -> dict:
        return {"mapped": f"{self.mapped[0]}:{self.mapped[1]}" if self.mapped else None,
                "failures": self.failures, "last_error": self.last_error}
