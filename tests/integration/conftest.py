"""Fixtures of the integration tests (helpers.py says how processes are reaped)."""
import signal

import pytest

from tests.integration.helpers import NodeProcess, Testnet, output


@pytest.fixture
def node_factory(tmp_path):
    """Start foreground nodes; every one is stopped at the end, by pid."""
    nodes = []

    def make(name, port=0, join=None, ready=True):
        node = NodeProcess(tmp_path / name, port=port, join=join)
        nodes.append(node)
        if ready:
            node.wait_ready()
        return node

    yield make
    for node in nodes:
        if node.alive():
            node.stop(signal.SIGKILL)


@pytest.fixture
def testnet_factory(tmp_path_factory):
    """make(nodes) -> a running Testnet, reaped at the end of the test."""
    made = []

    def make(nodes: int, name="net", extra=()) -> Testnet:
        net = Testnet(tmp_path_factory.mktemp(name))
        made.append(net)
        proc = net.up(nodes, *extra)
        assert proc.returncode == 0, output(proc)
        assert len(net.nodes) == nodes
        return net

    yield make
    _cleanup_all(made)


@pytest.fixture(scope="module")
def module_testnet_factory(tmp_path_factory):
    """Like testnet_factory, shared by the tests of one module."""
    made = []

    def make(nodes: int, name="net") -> Testnet:
        net = Testnet(tmp_path_factory.mktemp(name))
        made.append(net)
        proc = net.up(nodes)
        assert proc.returncode == 0, output(proc)
        return net

    yield make
    _cleanup_all(made)



def _cleanup_all(nets) -> None:
    """Reap every testnet, even if reaping one of them fails."""
    errors = []
    for net in nets:
        try:
            net.cleanup()
        except BaseException as err:  # noqa: BLE001 - go on with the others
            errors.append(f"{net.dir}: {err}")
    assert not errors, "; ".join(errors)
