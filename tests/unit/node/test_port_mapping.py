"""The port mapper's glue against a fake gateway client with the interface
of miniupnpc.UPnP (discover, selectigd, externalipaddress, addportmapping,
deleteportmapping, lanaddr, discoverdelay); the work runs inline here."""
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from flud.node.port_mapping import LEASE, RETRY_AFTER, MappingFailed, PortMapper


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


def mapper(gateway, seen):
    clock = MemoryReactorClock()
    return clock, PortMapper(clock, inline, 7400, lambda h, p: seen.append((h, p)),
                             client_factory=lambda: gateway)


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
