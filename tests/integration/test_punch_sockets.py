"""The sockets of a hole punch, for real on 127.0.0.1 (flud/protocol/punched.py):
a party whose listening port is marked for sharing dials out from that very
port (what makes a port-preserving NAT show the port peers were told),
TLS runs in the role it was given and HELLO proves the expected key; a
plain bind of the shared port still fails (a second node on it). (On
loopback a SYN reaches the other's listener at once, so the simultaneous
open itself is tested through NATs in the lab: test_netlab_punch.py.)"""
import json
import subprocess
import sys

SCRIPT = r"""
import errno, json, socket, sys
from twisted.internet import defer, protocol, reactor
from flud.protocol import messages
from flud.protocol.connection import ConnectionFactory
from flud.protocol.party import load_party
from flud.protocol.punched import dial_from_port, share_listening_port

class Handler:
    def connection_ready(self, conn): pass
    def connection_lost(self, conn): pass
    def request_received(self, conn, rid, op, message, end):
        conn.respond(rid, messages.Empty())
    def request_data(self, *a): pass
    def request_cancelled(self, *a): pass

class Nobody(protocol.Factory):
    def buildProtocol(self, addr):
        return None

a = load_party(sys.argv[1] + "/a", messages.ROLE_NODE)
b = load_party(sys.argv[1] + "/b", messages.ROLE_NODE)
listening = reactor.listenTCP(0, Nobody(), interface="127.0.0.1")
share_listening_port(listening)
a.listen_port = listening.getHost().port
plain = socket.socket()
plain.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    plain.bind(("127.0.0.1", a.listen_port))
    second_bind = "bound"
except OSError as err:
    second_bind = errno.errorcode[err.errno]
out = {"second_bind": second_bind}
h = Handler()
accepted = defer.Deferred()

class Ready(Handler):
    def connection_ready(self, conn):
        if not accepted.called:
            accepted.callback(conn)

b.listen_port = reactor.listenTCP(0, ConnectionFactory(b, Ready(), reactor),
                                  interface="127.0.0.1").getHost().port
da = dial_from_port(reactor, a, h, "127.0.0.1", b.listen_port, a.listen_port,
                    b.identity.node_id, True, "127.0.0.1", 5.0)

@defer.inlineCallbacks
def check():
    try:
        ca = yield da
        cb = yield accepted
        yield ca.request(1, messages.Empty())
        out.update(a_sees=ca.peer_id == b.identity.node_id,
                   b_sees=cb.peer_id == a.identity.node_id,
                   roles=[ca.tls_client, cb.tls_client], punched=ca.punched,
                   from_listening_port=ca.transport.getHost().port == a.listen_port,
                   b_saw_port=cb.transport.getPeer().port == a.listen_port)
    except Exception as err:
        out["error"] = repr(err)
    reactor.stop()

reactor.callWhenRunning(check)
reactor.callLater(15, reactor.stop)
reactor.run()
print(json.dumps(out))
"""


def test_a_punch_dials_from_the_shared_listening_port_and_authenticates(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"second_bind": "EADDRINUSE", "a_sees": True, "b_sees": True,
                   "roles": [True, False], "punched": True, "from_listening_port": True,
                   "b_saw_port": True}
