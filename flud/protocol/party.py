"""Who we are on the wire: an identity, a role, where we listen, and the TLS
contexts made from the identity's key. One place for both sides: a node and
a client load their party from their home the same way."""
import os

from flud.keys import Identity, self_signed_cert_pem
from flud.protocol.tls import make_context


class LocalParty:
    """Who we are on the wire: identity, role, where we listen, TLS contexts."""

    def __init__(self, identity, role, server_context, client_context,
                 listen_host="", listen_port=0, send_queue=None):
        self.identity = identity
        self.role = role
        self.server_context = server_context
        self.client_context = client_context
        self.listen_host = listen_host
        self.listen_port = listen_port
        # A memory-monitor Transfer (or None): every connection holds on it the
        # ciphertext queued in its transport ("queued for the network").
        self.send_queue = send_queue
        # Throttles (flud.protocol.ratelimit) every connection shares, or None.
        self.upload_limit = None
        self.download_limit = None


def load_party(home: str, role: int, host: str = "", port: int = 0) -> LocalParty:
    """Identity plus TLS contexts for a home (node or client)."""
    os.makedirs(home, exist_ok=True)
    identity = Identity.load_or_create(home)
    cert_path = os.path.join(home, "tls-cert.pem")
    if not os.path.exists(cert_path):
        temp = cert_path + ".tmp"
        with open(temp, "wb") as f:
            f.write(self_signed_cert_pem(identity))
        os.replace(temp, cert_path)
    key_path = os.path.join(home, "identity.pem")
    return LocalParty(identity, role,
                      make_context(cert_path, key_path, server_side=True),
                      make_context(cert_path, key_path, server_side=False),
                      host, port)
