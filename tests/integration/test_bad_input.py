"""Bad input against one real node process: it closes that one connection or
answers with an error code, leaves nothing partial visible, and keeps serving.
"""
import os
import signal
import socket
import ssl
import struct
import time

import pytest

from flud.keys import Identity
from flud.protocol import messages
from tests.integration.helpers import NodeProcess, share_path, tool, wait_until

pytestmark = pytest.mark.integration

CAPACITY = 64 * 1024 * 1024
MIB = 1024 * 1024
CLOSE_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 10.0  # docs/protocol.md, section 3


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad-input")
    proc = NodeProcess(base / "node", extra=("--capacity", str(CAPACITY)))
    try:
        proc.wait_ready()
        proc.client_home = str(base / "client")
        # a peer that connects and never says anything, checked at the end
        silent = socket.create_connection(("127.0.0.1", proc.port), timeout=5)
        proc.silent = (silent, time.monotonic())
        yield proc
        silent.close()
    finally:
        if proc.alive():
            proc.stop(signal.SIGKILL)


def closed_by_peer(sock, timeout=CLOSE_TIMEOUT) -> bool:
    """Read until the node closes the connection (True) or timeout (False)."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, ssl.SSLError, OSError):
            return True
        if not data:
            return True
    return False


def node_serves(node) -> dict:
    """A real client's STORE/RETRIEVE/VERIFY/DELETE round on a new connection."""
    result = tool("roundtrip", node.addr, node.client_home)
    assert result["retrieve_ok"] and result["range_ok"] and result["verify_ok"], result
    return result


def test_node_serves_a_real_client(node):
    result = node_serves(node)
    # data that does not match its key is refused and never becomes visible
    assert result["mismatch"] == "HASH_MISMATCH"
    assert result["mismatch_visible"] is False
    assert result["after_delete"] == "NOT_FOUND"


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: flud\r\n\r\n",
    bytes(range(256)) * 64,
    b"\x16\x03\x01\xff\xff" + b"\x00" * 100,   # a TLS record header that lies about its size
], ids=["http", "binary", "bad-tls-record"])
def test_garbage_instead_of_client_hello(node, garbage):
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        try:
            sock.sendall(garbage)
        except OSError:
            pass  # already closed by the node: fine
        assert closed_by_peer(sock), "the node kept a connection that sent garbage open"
    node_serves(node)
    assert node.alive()


def tls_connect(port):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384")
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw)


def header(length, frame_type, op, flags, reserved, rid):
    return struct.pack(">IBBBBI", length, frame_type, op, flags, reserved, rid)


def bad_hello():
    identity = Identity.generate()
    hello = messages.Hello(messages.PROTOCOL_VERSION, messages.ROLE_CLIENT, 0,
                           identity.public_der, identity.sign(b"not the channel binding"))
    body = hello.encode()
    return header(len(body), 0, 0, 1, 0, 0) + body


@pytest.mark.parametrize("frames", [
    header(0, 9, 0, 1, 0, 1),                      # unknown frame type
    header(0, 1, 1, 1, 7, 1),                      # nonzero reserved byte
    header(0xFFFFFFF0, 4, 0, 0, 0, 1),             # far over MAX_FRAME_PAYLOAD
    header(0, 1, 1, 1, 0, 1),                      # a PING before any HELLO
    bad_hello(),                                   # HELLO whose signature proves nothing
], ids=["unknown-type", "reserved-byte", "oversized", "request-before-hello", "bad-hello"])
def test_bad_frames_after_tls_close_that_connection(node, frames):
    with tls_connect(node.port) as sock:
        sock.sendall(frames)
        assert closed_by_peer(sock), "the node kept a connection with a bad frame open"
    node_serves(node)
    assert node.alive()


def test_peer_vanishing_mid_store_leaves_nothing(node):
    home = node.client_home
    before = tool("stats-one", node.addr, home)
    size, cut = 48 * MIB, 12 * MIB
    proc = tool("abort-store", node.addr, home, size, cut)
    key = proc["key"]
    assert proc["size"] == size and "error" not in proc, proc

    incoming = os.path.join(node.home, "store", "incoming")

    def settled():
        stats = tool("stats-one", node.addr, home)
        return stats if not os.listdir(incoming) and stats["store"]["reserved"] == 0 else None

    after = wait_until(settled, 15, "the node to drop the unfinished upload", interval=0.2)
    # the upload did start and did move data before the peer vanished
    assert after["server"]["stores"] == before["server"]["stores"] + 1
    assert after["server"]["bytes_stored_in"] - before["server"]["bytes_stored_in"] >= 2 * MIB
    # ... and none of it is visible
    assert after["store"]["shares"] == before["store"]["shares"]
    assert after["store"]["bytes_stored"] == before["store"]["bytes_stored"]
    assert not os.path.exists(share_path(node.home, key))
    keyfile = os.path.join(home, "keys.txt")
    with open(keyfile, "w") as f:
        f.write(key + "\n")
    assert tool("retrieve", node.addr, home, keyfile) == {key: "NOT_FOUND"}
    # the space it had reserved is free again: a STORE that needs it succeeds
    assert tool("store", node.addr, home, 40 * MIB, 1)["result"] == "ok"
    node_serves(node)


def test_full_node_refuses_store_and_stays_healthy(node):
    home = node.client_home
    stats = tool("stats-one", node.addr, home)
    too_big = stats["store"]["free"] + MIB
    assert too_big < 100 * MIB  # sanity: the node was started with a small capacity
    answer = tool("store", node.addr, home, too_big, 2)
    assert answer["result"] == "NO_SPACE", answer
    assert answer["message"], "NO_SPACE should come with a message for a person"
    assert tool("stats-one", node.addr, home)["store"]["shares"] == stats["store"]["shares"]
    node_serves(node)


def test_silent_peer_is_dropped_after_the_handshake_timeout(node):
    sock, opened = node.silent
    left = HANDSHAKE_TIMEOUT + 5 - (time.monotonic() - opened)
    assert closed_by_peer(sock, timeout=max(left, 1.0)), \
        "a peer that never completes the handshake is kept forever"


def test_peer_hanging_up_before_hello_is_not_a_critical_error(node_factory):
    quiet = node_factory("quiet")
    for _ in range(3):
        socket.create_connection(("127.0.0.1", quiet.port), timeout=5).close()
    tool("stats-one", quiet.addr, os.path.join(quiet.home, "client"))  # it still serves
    assert quiet.stop(signal.SIGTERM, timeout=10) == 0
    with open(os.path.join(quiet.home, "node.log")) as f:
        log = f.read()
    assert "Unhandled error in Deferred" not in log, log


def test_node_survived_everything_and_stops_cleanly(node):
    assert node.alive()
    node_serves(node)
    with open(os.path.join(node.home, "node.log")) as f:
        log = f.read()
    assert "Traceback" not in log, log[-3000:]
    assert node.stop(signal.SIGTERM, timeout=10) == 0
    assert not os.path.exists(os.path.join(node.home, "node.json"))
