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
