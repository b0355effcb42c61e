"""Sans-I/O TLS: two TLSEndpoints pumping bytes to each other, nothing else."""

from __future__ import annotations

import ssl

import pytest

from flud.keys import Identity
from flud.protocol import tls
from flud.protocol.tls import TLSEndpoint, TLSFailed, hello_transcript, make_context
from tests.cert_reader import public_der_of_cert
from tests.unit.protocol.helpers import write_cert


@pytest.fixture(scope="module")
def identities():
    return Identity.generate(), Identity.generate()


@pytest.fixture
def contexts(tmp_path, identities):
    server_id, client_id = identities
    server_cert, server_key = write_cert(tmp_path, server_id, "server")
    client_cert, client_key = write_cert(tmp_path, client_id, "client")
    return (make_context(server_cert, server_key, server_side=True),
            make_context(client_cert, client_key, server_side=False))


def endpoints(contexts):
    server_ctx, client_ctx = contexts
    return TLSEndpoint(server_ctx, server_side=True), TLSEndpoint(client_ctx, server_side=False)


def handshake(server: TLSEndpoint, client: TLSEndpoint) -> None:
    to_server = client.start()
    assert to_server, "the client speaks first (ClientHello)"
    for _ in range(10):
        if to_server:
            assert server.receive(to_server) == []
        to_client = server.pending()
        to_server = b""
        if to_client:
            assert client.receive(to_client) == []
            to_server = client.pending()
        if server.handshake_done and client.handshake_done and not to_server:
            return
    raise AssertionError("handshake did not finish")


def test_handshake_in_memory(contexts):
    server, client = endpoints(contexts)
    assert not server.handshake_done and not client.handshake_done
    handshake(server, client)
    assert server.handshake_done and client.handshake_done
    assert client._tls.version() == "TLSv1.2"
    assert client._tls.cipher()[0] in tls.CIPHERS.split(":")


def test_channel_binding_is_equal_on_both_sides_and_unique_per_session(contexts):
    server, client = endpoints(contexts)
    handshake(server, client)
    assert server.channel_binding == client.channel_binding
    assert len(client.channel_binding) == 12  # TLS 1.2 Finished verify_data
    server2, client2 = endpoints(contexts)
    handshake(server2, client2)
    assert server2.channel_binding == client2.channel_binding != client.channel_binding


def test_hello_transcript_binds_side_and_session():
    assert hello_transcript(True, b"x" * 12) == b"flud-hello-v1C" + b"x" * 12
    assert hello_transcript(False, b"x" * 12) == b"flud-hello-v1S" + b"x" * 12


def test_client_sees_the_servers_certificate(contexts, identities, tmp_path):
    server, client = endpoints(contexts)
    handshake(server, client)
    seen = client._tls.getpeercert(binary_form=True)
    assert seen == ssl.PEM_cert_to_DER_cert((tmp_path / "server.crt").read_text())
    assert public_der_of_cert(seen) == identities[0].public_der
    assert server._tls.getpeercert(binary_form=True) is None  # identity comes from HELLO, not X.509


def test_data_both_ways(contexts):
    server, client = endpoints(contexts)
    handshake(server, client)
    assert b"".join(server.receive(b"".join(client.send(b"hello server")))) == b"hello server"
    assert b"".join(client.receive(b"".join(server.send(b"hello client")))) == b"hello client"
    big = bytes(range(256)) * 8192  # 2 MiB: many 16 KiB records
    ciphertext = b"".join(client.send(big))
    assert big not in ciphertext and len(ciphertext) > len(big)
    assert b"".join(server.receive(ciphertext)) == big


def test_data_split_at_odd_boundaries(contexts):
    server, client = endpoints(contexts)
    handshake(server, client)
    ciphertext = b"".join(client.send(b"a" * 40000)) + b"".join(client.send(b"b" * 3))
    got = []
    for i in range(0, len(ciphertext), 997):
        got += server.receive(ciphertext[i:i + 997])
    assert b"".join(got) == b"a" * 40000 + b"bbb"


def test_read_into_decrypts_every_ready_record_in_place(contexts):
    server, client = endpoints(contexts)
    handshake(server, client)
    data = bytes(range(256)) * 160  # 40 KiB: three records
    ciphertext = b"".join(client.send(data))
    server.feed(ciphertext[:-1])  # the last record is not whole yet
    buffer = bytearray(64 * 1024)
    assert server.read_into(memoryview(buffer)[:20000]) == 20000  # stops where the buffer ends
    assert server.read_into(memoryview(buffer)[20000:]) == 32768 - 20000
    assert server.read_into(memoryview(buffer)[32768:]) == 0  # the third waits for its last byte
    server.feed(ciphertext[-1:])
    assert server.read_into(memoryview(buffer)[32768:]) == len(data) - 32768
    assert bytes(buffer[:len(data)]) == data


def test_read_into_a_corrupted_record_fails(contexts):
    server, client = endpoints(contexts)
    handshake(server, client)
    record = bytearray(b"".join(client.send(b"x" * 1000)))
    record[-3] ^= 0x01
    server.feed(bytes(record))
    with pytest.raises(TLSFailed):
        server.read_into(bytearray(2000))


def test_application_data_right_after_the_handshake(contexts):
    # TLS 1.2: the server finishes first and may send its first record (its
    # HELLO) with its Finished message; the client must read both in one go.
    server, client = endpoints(contexts)
    server.receive(client.start())
    client.receive(server.pending())
    server.receive(client.pending())
    assert server.handshake_done and not client.handshake_done
    flight = server.pending() + b"".join(server.send(b"first frame"))
    assert b"".join(client.receive(flight)) == b"first frame"
    assert client.handshake_done


def test_sending_before_the_handshake_is_refused(contexts):
    server, client = endpoints(contexts)
    client.start()
    with pytest.raises(TLSFailed):
        b"".join(client.send(b"too early"))


@pytest.mark.parametrize("where", [5 + 8 + 3, -1, -16])
def test_a_corrupted_record_fails(contexts, where):
    server, client = endpoints(contexts)
    handshake(server, client)
    record = bytearray(b"".join(client.send(b"some application data")))
    record[where] ^= 0x01
    with pytest.raises(TLSFailed):
        server.receive(bytes(record))


def test_garbage_instead_of_a_client_hello_fails(contexts):
    server, client = endpoints(contexts)
    with pytest.raises(TLSFailed):
        server.receive(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")


def test_garbage_instead_of_a_server_hello_fails(contexts):
    server, client = endpoints(contexts)
    client.start()
    with pytest.raises(TLSFailed):
        client.receive(b"\x16\x03\x03\x00\x05hello" + b"\x00" * 64)


def test_tls13_only_peer_is_refused(contexts, tmp_path, identities):
    server_ctx, _ = contexts
    cert, key = write_cert(tmp_path, identities[1], "tls13")
    modern = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    modern.check_hostname = False
    modern.verify_mode = ssl.CERT_NONE
    modern.minimum_version = ssl.TLSVersion.TLSv1_3
    client = TLSEndpoint(modern, server_side=False)
    server = TLSEndpoint(server_ctx, server_side=True)
    with pytest.raises(TLSFailed):
        server.receive(client.start())

