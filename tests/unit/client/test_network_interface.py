"""The network the client's parts use, and the in-memory one the tests use,
both provide INetwork (and so the tests drive the parts through it)."""
import pytest
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyClass, verifyObject

from flud.client.home import create_home
from flud.client.interfaces import INetwork
from flud.client.network import Network
from tests.unit.client.fakes import FakeNetwork, FakeReactor


def test_the_real_network_provides_the_interface(tmp_path):
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    network = Network(FakeReactor(), home.path, [])
    try:
        assert verifyObject(INetwork, network)
    finally:
        network.close()


def test_the_fake_network_provides_the_interface():
    assert verifyObject(INetwork, FakeNetwork(FakeReactor(), nodes=3))


def test_the_check_fails_for_a_network_short_of_a_method():
    class NoCancel(FakeNetwork):
        cancel = None

    with pytest.raises(Invalid):
        verifyClass(INetwork, NoCancel)


def test_the_restores_metered_network_provides_the_interface_and_counts_retrieves():
    from flud.client.restore.metered_network import MeteredNetwork
    from tests.unit.client.fakes import run_until
    clock = FakeReactor()
    fake = FakeNetwork(clock, nodes=3)
    metered = MeteredNetwork(fake)
    assert verifyObject(INetwork, metered)
    node = next(iter(fake.nodes))
    import blake3
    key = blake3.blake3(b"x" * 1000).digest()   # a share is stored under its hash
    run_until(clock, metered.call(node, "store", key, b"x" * 1000))
    assert run_until(clock, metered.call(node, "retrieve", key, 10, 100)) == b"x" * 100
    assert (metered.fetched_bytes, metered.fetches) == (100, 1)
