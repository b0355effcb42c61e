"""NAT-PMP on the wire: thin Twisted glue around flud/node/natpmp.py.

Non-blocking on the reactor thread: each request gets its own UDP socket
connected to the gateway's port 5351 (the kernel drops datagrams from any
other source, the check RFC 6886 3.5 asks for), sends and resends on the
Exchange's schedule, and is closed when answered or given up. Requests go
one at a time (RFC 6886 3.1: a client queues them). An ICMP "port
unreachable" from the gateway ends the wait at once: nothing serves NAT-PMP
there.
"""
from twisted.internet import defer
from twisted.internet.protocol import DatagramProtocol

from flud.node import natpmp


class _Socket(DatagramProtocol):
    def __init__(self, exchange_glue):
        self.glue = exchange_glue

    def datagramReceived(self, data, addr):
        self.glue.received(data)

    def connectionRefused(self):
        self.glue.refused()


class _Request:
    """One Exchange on one socket; `done` fires with the answer."""

    def __init__(self, reactor, gateway: str, exchange: natpmp.Exchange):
        self.reactor = reactor
        self.exchange = exchange
        self.done = defer.Deferred()
        self._timer = None
        self._port = reactor.listenUDP(0, _Socket(self))
        try:
            self._port.connect(gateway, natpmp.PORT)
        except Exception:
            self._port.stopListening()
            raise
        self._send(exchange.start(reactor.seconds()))

    def _send(self, deadline: float) -> None:
        self._port.write(self.exchange.datagram)
        if self.done.called:
            # a connected UDP port reports an ICMP "port unreachable" from
            # inside write() (connectionRefused): finished, the port closed,
            # nothing is to be sent again
            return
        self._timer = self.reactor.callLater(max(0.0, deadline - self.reactor.seconds()),
                                             self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        if self.done.called:
            return
        try:
            deadline = self.exchange.timed_out(self.reactor.seconds())
        except natpmp.NatPmpError as err:
            self._finish(err)
            return
        self._send(deadline)

    def received(self, data: bytes) -> None:
        if self.done.called:
            return
        try:
            answer = self.exchange.received(data)
        except natpmp.NatPmpError as err:
            self._finish(err)
            return
        if answer is not None:
            self._finish(answer)

    def refused(self) -> None:
        if not self.done.called:
            self._finish(natpmp.NoNatPmpGateway("the gateway's NAT-PMP port is closed "
                                                "(ICMP port unreachable)"))

    def cancel(self) -> None:
        if not self.done.called:
            self._finish(defer.CancelledError("NAT-PMP request cancelled"))

    def _finish(self, outcome) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._port.stopListening()
        if isinstance(outcome, BaseException):
            self.done.errback(outcome)
        else:
            self.done.callback(outcome)


class NatPmpClient:
    """Asks one gateway; every method returns a Deferred."""

    def __init__(self, reactor, gateway: str, first_wait: float = natpmp.FIRST_WAIT,
                 attempts: int = natpmp.ATTEMPTS):
        self.reactor = reactor
        self.gateway = gateway
        self.first_wait = first_wait
        self.attempts = attempts
        self._lock = defer.DeferredLock()
        self._current = None

    def external_address(self) -> defer.Deferred:
        """Fires with natpmp.ExternalAddress."""
        return self._ask(natpmp.external_address_request(), self.attempts)

    def map_tcp(self, internal_port: int, external_port: int, lifetime: int) -> defer.Deferred:
        """Fires with natpmp.Mapping (its external port may differ from the
        one suggested)."""
        return self._ask(natpmp.mapping_request(internal_port, external_port, lifetime),
                         self.attempts)

    def delete_tcp(self, internal_port: int, attempts: int = 3) -> defer.Deferred:
        """Ask the gateway to drop the mapping (fewer attempts: a node
        shutting down does not wait two minutes; the lease ends it anyway)."""
        return self._ask(natpmp.delete_request(internal_port), attempts)

    def close(self) -> None:
        """Give up the request in flight (its Deferred fails CancelledError)."""
        if self._current is not None:
            self._current.cancel()

    def _ask(self, request: bytes, attempts: int) -> defer.Deferred:
        def run(_):
            exchange = natpmp.Exchange(request, self.first_wait, attempts)
            try:
                self._current = _Request(self.reactor, self.gateway, exchange)
            except Exception as err:   # no route to the gateway, no socket
                raise natpmp.NoNatPmpGateway(f"cannot reach {self.gateway}: {err}") from None
            return self._current.done

        def release(result):
            self._current = None
            self._lock.release()
            return result

        d = self._lock.acquire()
        d.addCallback(run)
        d.addBoth(release)
        return d
