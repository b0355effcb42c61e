"""A dial to a port nobody listens on fails at once, as ConnectFailed: a
connection that never was, told apart from one that was lost."""
import socket
import time

import pytest

from tests.integration.helpers import tool

pytestmark = pytest.mark.integration

DIAL_TIMEOUT = 30.0  # the whole subprocess; a refused dial takes milliseconds


def test_a_dial_to_a_closed_port_fails_with_connect_failed(tmp_path):
    with socket.socket() as sock:  # a port that was just free, and is closed again
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = tool("dial", f"127.0.0.1:{port}", tmp_path / "client", timeout=DIAL_TIMEOUT)
    assert (result["result"], result["code"]) == ("ConnectFailed", "CONNECT_FAILED"), result
    assert result["message"].startswith(f"cannot connect to 127.0.0.1:{port}: ")
    assert time.monotonic() - started < DIAL_TIMEOUT / 2  # refused, not waited out
