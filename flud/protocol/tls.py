"""Sans-I/O TLS over memory BIOs (stdlib ssl): ciphertext in, plaintext out.

docs/protocol.md section 1 says why stdlib ssl and a signed channel binding
instead of pyOpenSSL. Nothing here touches a socket, so the handshake and the
HELLO proof are tested with plain bytes.
"""
import ssl

from flud.protocol.errors import TLSFailed

CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
           "ECDHE-ECDSA-CHACHA20-POLY1305")
# SSL_read hands back at most one TLS record (16 KiB) per call.
READ_SIZE = 64 * 1024
# Plaintext encrypted at a time: one TLS record. OpenSSL's outgoing memory BIO
# keeps the largest size it ever held for the life of the connection, so this
# is also what each connection keeps for sending (fifty connections at 64 KiB
# kept ~3 MB more than at 16 KiB; the encryption rate is the same).
SEND_PIECE = 16 * 1024
# A node encrypts 64 KiB at a time. Nearly all it sends is RETRIEVE answers,
# and each piece costs a pass of Python (an SSL write, a transport write, an
# epoll update): a quarter of the passes cut node CPU in a 1 GiB restore
# (about 0.3 ms of Python per 512 KiB block). The outgoing BIO then keeps
# ~64 KiB, but only on the connections that carried large answers (one per
# restoring client), while the client, whose ~50 connections all carry
# STOREs, stays at 16 KiB.
NODE_SEND_PIECE = 64 * 1024
HELLO_CONTEXT = b"flud-hello-v1"


def make_context(cert_file: str, key_file: str, server_side: bool) -> ssl.SSLContext:
    protocol = ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    # Identity is proven by the signed channel binding in HELLO, not by X.509.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(cert_file, key_file)
    context.options |= ssl.OP_NO_TICKET  # full handshakes: tls-unique stays unique
    return context


def hello_transcript(signer_is_tls_client: bool, channel_binding: bytes) -> bytes:
    """What a party signs in HELLO: bound to this TLS session and its side."""
    return HELLO_CONTEXT + (b"C" if signer_is_tls_client else b"S") + channel_binding


class TLSEndpoint:
    def __init__(self, context: ssl.SSLContext, server_side: bool):
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing,
                                     server_side=server_side)
        self.server_side = server_side
        self.handshake_done = False

    def start(self) -> bytes:
        """Bytes to send first (the ClientHello on the client side)."""
        self._advance_handshake()
        return self._outgoing.read()

    def receive(self, ciphertext) -> list:
        """Feed bytes from the network; return decrypted plaintext chunks
        (feed() then read() until empty; the wire calls those itself, to
        decrypt some records in place with read_into())."""
        self.feed(ciphertext)
        chunks = []
        while chunk := self.read():
            chunks.append(chunk)
        return chunks

    def feed(self, ciphertext) -> None:
        """Bytes from the network, to be read as plaintext with read() or
        read_into() (the handshake advances here)."""
        self._incoming.write(ciphertext)
        if not self.handshake_done:
            self._advance_handshake()

    def read(self) -> bytes:
        """The next plaintext (at most one TLS record), b"" when none is
        complete yet (or the peer closed)."""
        if not self.handshake_done:
            return b""
        try:
            return self._tls.read(READ_SIZE)
        except ssl.SSLWantReadError:
            return b""
        except ssl.SSLError as err:
            raise TLSFailed(f"TLS record error: {err.reason or err}") from None

    def read_into(self, buffer) -> int:
        """Decrypt what is ready straight into `buffer` (at most its length),
        a record at a time: the bytes placed, 0 when no record is ready."""
        if not self.handshake_done:
            return 0
        read = self._tls.read
        view = memoryview(buffer)
        placed = 0
        try:
            while placed < len(view):
                n = read(len(view) - placed, view[placed:])
                if not n:
                    break  # close_notify
                placed += n
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as err:
            raise TLSFailed(f"TLS record error: {err.reason or err}") from None
        return placed

    def send(self, plaintext) -> list:
        """Encrypt plaintext; return the ciphertext pieces to write.

        OpenSSL's memory BIOs keep the largest size they ever held, for the
        life of the connection: fed 1 MiB at a time, fifty connections kept
        ~25 MB. Feeding SEND_PIECE at a time bounds each one."""
        view = memoryview(plaintext)
        return [self.encrypt(view[start:start + SEND_PIECE])
                for start in range(0, len(view), SEND_PIECE)]

    def encrypt(self, piece) -> bytes:
        """The ciphertext of one piece (at most NODE_SEND_PIECE bytes, see send())."""
        try:
            self._tls.write(piece)
        except ssl.SSLError as err:
            raise TLSFailed(f"TLS write error: {err.reason or err}") from None
        return self._outgoing.read()

    def pending(self) -> bytes:
        """Handshake bytes produced by the last receive()."""
        return self._outgoing.read()

    @property
    def channel_binding(self) -> bytes:
        return self._tls.get_channel_binding("tls-unique")

    def _advance_handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLError as err:
            raise TLSFailed(f"TLS handshake failed: {err.reason or err}") from None
        self.handshake_done = True
