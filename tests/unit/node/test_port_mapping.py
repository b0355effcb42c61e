"""The port mapper's glue against fakes with the interfaces of
miniupnpc.UPnP (discover, selectigd, externalipaddress, addportmapping,
deleteportmapping, lanaddr, discoverdelay) and of our NAT-PMP client
(external_address, map_tcp, delete_tcp); the work runs inline here.
Against miniupnpd for real: tests/integration/test_netlab_portmap.py."""
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from flud.node import natpmp
from flud.node.port_mapping import (LEASE, RETRY_AFTER, MappingFailed, NatPmp, PortMapper,
                                    UpnpIgd)


class FakeGateway:
    def __init__(self, devices=1, accept=True, external="198.18.200.1"):
        self.devices, self.accept, self.external = devices, accept, external
        self.lanaddr = "198.19.1.2"
        self.discoverdelay = None
        self.mappings = {}
        self.calls = 0

    def discover(self):
        return self.devices

    def selectigd(self):
        if not self.devices:
            raise Exception("No UPnP device discovered")

    def externalipaddress(self):
        return self.external

    def addportmapping(self, ext, proto, host, port, description, remote, lease):
        self.calls += 1
        if self.accept:
            self.mappings[(ext, proto)] = (host, port, lease)
        return self.accept

    def deleteportmapping(self, ext, proto):
        return self.mappings.pop((ext, proto), None) is not None


def inline(fn, *args):
    try:
        return defer.succeed(fn(*args))
    except Exception:
        return defer.fail()


class FakeNatPmp:
    """A NAT-PMP gateway behind NatPmpClient's interface."""

    def __init__(self, reactor, gateway="198.19.2.1", external="198.18.201.1", grant=None,
                 answer=True):
        self.reactor, self.gateway, self.external = reactor, gateway, external
        self.grant, self.answer = grant, answer     # grant: (port, lifetime) it gives instead
        self.mappings, self.deleted, self.epoch = {}, [], 100

    def _fail(self):
        return defer.fail(natpmp.NoNatPmpGateway("no NAT-PMP answer from the gateway"))

    def external_address(self):
        if not self.answer:
            return self._fail()
        return defer.succeed(natpmp.ExternalAddress(self.epoch, self.external))

    def map_tcp(self, internal, external, lifetime):
        if not self.answer:
            return self._fail()
        port, lifetime = self.grant or (external, lifetime)
        self.mappings[internal] = (port, lifetime)
        return defer.succeed(natpmp.Mapping(self.epoch, natpmp.OP_MAP_TCP, internal, port,
                                            lifetime))

    def delete_tcp(self, internal):
        self.deleted.append(internal)
        self.mappings.pop(internal, None)
        return defer.succeed(None)


def mapper(gateway, seen, nat_pmp=None):
    clock = MemoryReactorClock()
    methods = [UpnpIgd(inline, lambda: gateway)]
    if nat_pmp is not None:
        nat_pmp.reactor = clock
        methods.append(NatPmp(clock, find_gateway=lambda: nat_pmp.gateway,
                              client_factory=lambda reactor, where: nat_pmp))
    return clock, PortMapper(clock, inline, 7400, lambda h, p: seen.append((h, p)),
                             methods=methods)


def test_a_mapping_is_made_off_the_reactor_and_renewed_at_half_its_lease():
    gateway, seen = FakeGateway(), []
    clock, ports = mapper(gateway, seen)
    ports.start()
    clock.advance(0)
    assert seen == [("198.18.200.1", 7400)]
    assert gateway.mappings[(7400, "TCP")] == ("198.19.1.2", 7400, LEASE)
    assert gateway.discoverdelay is not None
    clock.advance(LEASE / 2)
    assert gateway.calls == 2 and seen == [("198.18.200.1", 7400)]   # renewed, same place
    gateway.external = "198.18.200.9"
    clock.advance(LEASE / 2)
    assert seen[-1] == ("198.18.200.9", 7400)                       # the router moved
    ports.stop()
    assert gateway.mappings == {}
    assert not clock.getDelayedCalls()


def test_no_gateway_is_said_once_and_tried_again_later():
    gateway, seen = FakeGateway(devices=0), []
    clock, ports = mapper(gateway, seen)
    ports.start()
    clock.advance(0)
    assert seen == [] and ports.failures == 1 and "no UPnP gateway" in ports.last_error
    gateway.devices = 1
    clock.advance(RETRY_AFTER)
    assert seen == [("198.18.200.1", 7400)] and ports.summary()["mapped"] == "198.18.200.1:7400"


def test_a_refused_mapping_is_a_failure_not_a_candidate():
    gateway, seen = FakeGateway(accept=False), []
    clock, ports = mapper(gateway, seen)
    ports.start()
    clock.advance(0)
    assert seen == [] and ports.mapped is None and "refused" in ports.last_error


def test_without_miniupnpc_the_error_says_so(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_miniupnpc(name, *args, **kwargs):
        if name == "miniupnpc":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_miniupnpc)
    from flud.node.port_mapping import default_gateway_client
    try:
        default_gateway_client()
    except MappingFailed as err:
        assert "miniupnpc is not installed" in str(err)
    else:
        raise AssertionError("no error without miniupnpc")


class SilentGateway(FakeGateway):
    """miniupnpc 2.3 raises a bare Exception("Success") when nothing answers."""

    def discover(self):
        raise Exception("Success")


def test_upnp_finding_nothing_falls_back_to_nat_pmp_renewed_at_half_its_grant():
    nat_pmp, seen = FakeNatPmp(None, grant=(7400, 1800)), []
    clock, ports = mapper(SilentGateway(), seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert seen == [("198.18.201.1", 7400)]
    assert nat_pmp.mappings == {7400: (7400, 1800)}
    summary = ports.summary()
    assert summary["method"] == "nat-pmp" and summary["mapped"] == "198.18.201.1:7400"
    assert summary["mapped_after"] == 0
    clock.advance(899)
    assert len(nat_pmp.mappings) == 1 and ports.holder.name == "nat-pmp"
    nat_pmp.epoch = 5                  # the gateway restarted: the renewal maps again
    clock.advance(1)
    assert ports.holder.restarts == 1 and ports.mapped == ("198.18.201.1", 7400)
    stopped = ports.stop()
    assert stopped.called and nat_pmp.deleted == [7400] and not clock.getDelayedCalls()


def test_the_holder_is_asked_first_at_renewal():
    gateway, nat_pmp, seen = FakeGateway(), FakeNatPmp(None), []
    gateway.accept = False                                   # UPnP refuses: NAT-PMP maps
    clock, ports = mapper(gateway, seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert ports.holder.name == "nat-pmp" and gateway.calls == 1
    gateway.accept = True
    clock.advance(LEASE / 2)
    assert ports.holder.name == "nat-pmp" and gateway.calls == 1   # UPnP not asked again


def test_a_gateway_offering_another_port_is_refused_and_its_mapping_dropped():
    nat_pmp, seen = FakeNatPmp(None, grant=(40123, 3600)), []
    clock, ports = mapper(SilentGateway(), seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert seen == [] and ports.mapped is None and nat_pmp.deleted == [7400]
    assert "offered port 40123, not 7400" in ports.last_error


def test_every_method_failing_is_one_error_naming_each_and_a_retry_later():
    nat_pmp, seen = FakeNatPmp(None, answer=False), []
    clock, ports = mapper(SilentGateway(), seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert ports.failures == 1
    assert "upnp-igd: no UPnP gateway answered" in ports.last_error
    assert "nat-pmp: NAT-PMP at 198.19.2.1: no NAT-PMP answer" in ports.last_error
    nat_pmp.answer = True
    clock.advance(RETRY_AFTER)
    assert seen == [("198.18.201.1", 7400)]


def test_a_gateway_without_an_external_address_maps_nothing():
    nat_pmp, seen = FakeNatPmp(None, external="0.0.0.0"), []
    clock, ports = mapper(FakeGateway(external=""), seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert seen == [] and "no usable external address" in ports.last_error
    assert "no external address (0.0.0.0)" in ports.last_error


def test_no_default_gateway_no_nat_pmp():
    clock = MemoryReactorClock()
    method = NatPmp(clock, find_gateway=lambda: None, client_factory=None)
    failure = []
    method.map(7400, LEASE).addErrback(failure.append)
    assert "no IPv4 default gateway" in failure[0].getErrorMessage()


class LaterThreads:
    """run_in_thread whose calls run when the test says (a slow SSDP)."""

    def __init__(self):
        self.waiting = []

    def __call__(self, fn, *args):
        d = defer.Deferred()
        self.waiting.append((fn, args, d))
        return d

    def run_all(self):
        while self.waiting:
            self.run_once()

    def run_once(self):
        """The calls waiting now (not those their outcomes queue)."""
        batch, self.waiting = self.waiting, []
        for fn, args, d in batch:
            try:
                d.callback(fn(*args))
            except Exception:
                d.errback()


def test_discoveries_race_and_the_first_gateway_found_maps():
    """A router that speaks only NAT-PMP answers it in milliseconds while
    UPnP's SSDP still waits: NAT-PMP maps at once; UPnP's late answer
    (discovery only) maps nothing."""
    clock, threads, seen = MemoryReactorClock(), LaterThreads(), []
    gateway, nat_pmp = FakeGateway(), FakeNatPmp(clock)
    ports = PortMapper(clock, threads, 7400, lambda h, p: seen.append((h, p)), methods=[
        UpnpIgd(threads, lambda: gateway),
        NatPmp(clock, lambda: nat_pmp.gateway, lambda reactor, where: nat_pmp)])
    ports.start()
    clock.advance(0)
    assert seen == [("198.18.201.1", 7400)] and ports.holder.name == "nat-pmp"
    threads.run_all()                       # SSDP answers late
    assert gateway.calls == 0 and gateway.mappings == {} and len(seen) == 1


def test_a_renewal_that_fails_discovers_again():
    gateway, nat_pmp, seen = FakeGateway(), FakeNatPmp(None), []
    clock, ports = mapper(gateway, seen, nat_pmp)
    ports.start()
    clock.advance(0)
    assert ports.holder.name == "upnp-igd"
    gateway.accept = False                 # the UPnP gateway stops mapping
    clock.advance(LEASE / 2)
    assert ports.holder.name == "nat-pmp" and ports.mapped == ("198.18.201.1", 7400)
    assert seen[-1] == ("198.18.201.1", 7400) and ports.failures == 0


def test_a_mapping_that_lands_after_stop_is_dropped_again():
    clock, threads, seen = MemoryReactorClock(), LaterThreads(), []
    gateway = FakeGateway()
    ports = PortMapper(clock, threads, 7400, lambda h, p: seen.append((h, p)),
                       methods=[UpnpIgd(threads, lambda: gateway)])
    ports.start()
    clock.advance(0)
    threads.run_once()                # discovered; the mapping request now waits
    ports.stop()
    threads.run_all()                 # the gateway maps, then is asked to drop it
    assert seen == [] and gateway.calls == 1 and gateway.mappings == {}
