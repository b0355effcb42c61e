"""One error root: every protocol error is a FludError with a stable code,
the wire codes are one table, and a dial that never connects says so."""
from types import SimpleNamespace

import pytest
from twisted.internet.error import ConnectionRefusedError, TimeoutError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from flud.errors import FludError
from flud.protocol import stall, tls
from flud.protocol.client import ClientOnlyHandler
from flud.protocol.connection import HANDSHAKE_TIMEOUT, dial
from flud.protocol.errors import (STORAGE_CODES, AuthenticationFailed, ConnectFailed,
                                  ConnectionLost, ErrorCode, FrameError, PeerStalled,
                                  RemoteError, TLSFailed, code_for_exception, from_wire,
                                  wire_of)
from flud.storage import errors as storage_errors
from tests.unit.protocol.helpers import Outcome, make_party


def test_every_protocol_error_is_a_flud_error_with_its_own_stable_code():
    classes = [ConnectFailed, ConnectionLost, AuthenticationFailed, TLSFailed, PeerStalled]
    for cls in classes + [RemoteError, FrameError]:
        assert issubclass(cls, FludError)
    codes = [cls.code for cls in classes]
    assert len(set(codes)) == len(codes) and all(c.isupper() for c in codes)
    assert ConnectFailed.code == "CONNECT_FAILED" and ConnectionLost.code == "CONNECTION_LOST"
    assert not issubclass(ConnectFailed, ConnectionLost)  # a caller that cares catches both


def test_the_errors_are_importable_where_they_are_raised():
    assert tls.TLSFailed is TLSFailed and stall.PeerStalled is PeerStalled


def test_a_stalled_peer_is_still_a_connection_error():
    """Callers tell a node's failure from a file's by OSError; PeerStalled
    has always been a ConnectionError and stays one."""
    error = PeerStalled("node 0123 made no progress for 4.0 s")
    assert isinstance(error, ConnectionError) and error.strerror is None
    assert str(error) == "node 0123 made no progress for 4.0 s"


def test_one_table_maps_wire_integers_and_names():
    wires = [code.wire for code in ErrorCode]
    assert len(set(wires)) == len(wires)
    for code in ErrorCode:
        assert code.value == code.name == str(code) == f"{code}"
        assert from_wire(code.wire) is code and wire_of(code) == code.wire
    assert from_wire(999) is None and wire_of(999) == 999


def test_a_remote_error_carries_its_name_as_code_and_its_wire_integer():
    error = RemoteError(ErrorCode.NO_SPACE, "node full")
    assert error.code == ErrorCode.NO_SPACE == "NO_SPACE" and error.wire_code == 6
    assert str(error) == "NO_SPACE: node full" and error.message == "node full"
    from_peer = RemoteError(6, "node full")  # as an ERROR frame brings it
    assert from_peer.code is ErrorCode.NO_SPACE and str(from_peer) == str(error)
    assert FrameError(ErrorCode.PROTOCOL, "a second HELLO").code is ErrorCode.PROTOCOL


# Storage errors no peer causes: an upload used after its end (the node's
# own bug) and a store on disk this node cannot read. Answered INTERNAL.
NOT_THE_PEERS = {"upload_closed", "unsupported_format"}


def test_every_storage_code_is_answered_with_its_wire_code():
    """storage/ imports nothing of flud: its string codes are mapped here."""
    for cls in vars(storage_errors).values():
        if isinstance(cls, type) and issubclass(cls, storage_errors.StorageError) \
                and cls is not storage_errors.StorageError:
            expected = (ErrorCode.INTERNAL if cls.code in NOT_THE_PEERS
                        else STORAGE_CODES[cls.code])
            assert code_for_exception(cls("x")) is expected, cls
    assert code_for_exception(RemoteError(ErrorCode.BUSY, "x")) is ErrorCode.BUSY
    assert code_for_exception(ValueError("a bug")) is ErrorCode.INTERNAL
    assert code_for_exception(ConnectionLost("gone")) is ErrorCode.INTERNAL
    assert code_for_exception(RemoteError(999, "from the future")) is ErrorCode.INTERNAL


@pytest.mark.parametrize("reason", [ConnectionRefusedError(), TimeoutError()])
def test_a_dial_that_never_connects_fails_with_connect_failed(tmp_path, reason):
    reactor = MemoryReactorClock()
    party = make_party(tmp_path, "client")
    outcome = Outcome(dial(reactor, party, ClientOnlyHandler(), "127.0.0.1", 7))
    host, port, factory, timeout, _ = reactor.tcpClients[-1]
    assert timeout == HANDSHAKE_TIMEOUT
    factory.clientConnectionFailed(SimpleNamespace(host=host, port=port), Failure(reason))
    error = outcome.failure(ConnectFailed)
    assert str(error) == f"cannot connect to 127.0.0.1:7: {Failure(reason).getErrorMessage()}"


def test_a_dial_that_connected_and_was_lost_before_hello_is_a_lost_connection(tmp_path):
    reactor = MemoryReactorClock()
    party = make_party(tmp_path, "client")
    outcome = Outcome(dial(reactor, party, ClientOnlyHandler(), "127.0.0.1", 7))
    _, _, factory, _, _ = reactor.tcpClients[-1]
    conn = factory.buildProtocol(None)
    conn.makeConnection(_NullTransport())
    conn.connectionLost(None)
    outcome.failure(ConnectionLost)


class _NullTransport:
    """Enough of a TCP transport for a connection that never hears back."""

    def setTcpNoDelay(self, enabled):
        pass

    def registerProducer(self, producer, streaming):
        pass

    def write(self, data):
        pass

    def getPeer(self):
        return SimpleNamespace(host="127.0.0.1", port=7)
