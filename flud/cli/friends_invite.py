"""`flud friends invite | accept`: a friend's node, certified by a short
human code instead of pasted hex (magic-wormhole).

The node's owner runs `invite` beside the node's home: it allocates a code
on a wormhole mailbox ("7-guitarist-revenge") and waits. The friend runs
`accept CODE` with their client home. The two sides agree on a key from
the code (SPAKE2: a wrong guess fails, and each code is good for one
try), then the invite sends the node's id and address; `accept` certifies
that node id with the home's user key and adds the address to the home's
bootstrap list. Nothing else is trusted from the message: the node id is
what TLS proves on every connection afterwards, so an address that lies
reaches nobody who can pass as that node.

Only these commands import `wormhole`; a node process never does.
"""
import json
import os
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_OK

APP_ID = "flud.example/friends-invite/v1"
DEFAULT_MAILBOX = "ws://relay.magic-wormhole.io:4000/v1"
MAILBOX_ENV = "FLUD_WORMHOLE_MAILBOX"
INVITE_VERSION = 1
MAX_MESSAGE = 4096
DAY = 86400


def add_invite_commands(friends) -> None:
    invite = friends.add_parser("invite", help="offer a node of yours to a friend: prints a "
                                               "short code to give them")
    invite.add_argument("--node-home", required=True, help="the node's home directory")
    invite.add_argument("--host", help="the address your friend reaches the node at "
                                       "(default: the one it listens on)")
    invite.add_argument("--port", type=int, help="the port your friend reaches it at")
    _mailbox_options(invite, 600)
    invite.set_defaults(handler=cmd_invite)

    accept = friends.add_parser("accept", help="certify a friend's node from the code "
                                               "they gave you")
    accept.add_argument("--home", required=True)
    accept.add_argument("code", help="the code `flud friends invite` printed")
    accept.add_argument("--name", default="", help="a name to show in `friends list`")
    accept.add_argument("--days", type=int, default=365)
    _mailbox_options(accept, 120)
    accept.set_defaults(handler=cmd_accept)


def _mailbox_options(parser, timeout) -> None:
    parser.add_argument("--mailbox", default=os.environ.get(MAILBOX_ENV, DEFAULT_MAILBOX),
                        help=f"the wormhole mailbox server (default: ${MAILBOX_ENV}, "
                             f"else {DEFAULT_MAILBOX})")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"give up after this many seconds (default {timeout})")


def _fail(message, code=None) -> int:
    print(f"error: {message}" + (f" [{code}]" if code else ""), file=sys.stderr)
    return EXIT_ERROR


def _node_address(args):
    from flud.cli.node_ids import node_id_of_home
    node_id = node_id_of_home(args.node_home)
    host, port = args.host, args.port
    try:
        with open(os.path.join(args.node_home, "node.json")) as f:
            listening = json.load(f)
        host = host or listening["host"]
        port = port or listening["port"]
    except (OSError, ValueError, KeyError):
        pass
    if not host or not port:
        raise ValueError("the node is not running (no node.json): start it, or give "
                         "--host and --port")
    return node_id, host, int(port)


def cmd_invite(args) -> int:
    from flud.cli.runner import run_reactor
    try:
        node_id, host, port = _node_address(args)
    except ValueError as err:
        return _fail(err)
    offer = json.dumps({"v": INVITE_VERSION, "node_id": node_id.hex(), "host": host,
                        "port": port}).encode()
    try:
        reply = run_reactor(lambda reactor: _exchange(reactor, args, None, offer))
    except Exception as err:   # the wormhole's errors: wrong code, mailbox away, timeout
        return _fail(f"the invite did not complete: {_why(err)}", "INVITE_FAILED")
    try:
        answer = json.loads(reply)
        client = answer["client_id"]
    except (ValueError, KeyError, TypeError):
        return _fail("the other side answered something that is not an acceptance",
                     "INVITE_FAILED")
    print(f"accepted: node {node_id.hex()} is certified by client {client}")
    return EXIT_OK


def cmd_accept(args) -> int:
    from flud.cli.home import open_home
    from flud.cli.runner import run_reactor
    from flud.client.friends_store import FriendsStore

    home = open_home(args.home)
    if home is None:
        return EXIT_ERROR
    try:
        store = FriendsStore(home.path, home.identity)
        answer = json.dumps({"v": INVITE_VERSION,
                             "client_id": home.identity.node_id.hex()}).encode()
        try:
            raw = run_reactor(lambda reactor: _exchange(reactor, args, args.code, answer,
                                                        check=_offer_of))
        except Exception as err:
            return _fail(f"the invite did not complete: {_why(err)}", "INVITE_FAILED")
        node_id, host, port = _offer_of(raw)
        cert = store.add(node_id, time.time(), args.days * DAY, args.name or host)
        _add_bootstrap(home.path, host, port)
    finally:
        home.close()
    print(f"certified node {cert.node_id.hex()} at {host}:{port} until "
          f"{time.strftime('%Y-%m-%d', time.gmtime(cert.expires))}")
    return EXIT_OK


def _offer_of(raw: bytes):
    """(node id, host, port) of an invite's message; ValueError if it is not one."""
    if len(raw) > MAX_MESSAGE:
        raise ValueError("the invite is too long")
    offer = json.loads(raw)
    if not isinstance(offer, dict) or offer.get("v") != INVITE_VERSION:
        raise ValueError("not a flud invite of a version this flud reads")
    node_id = bytes.fromhex(offer["node_id"])
    host, port = offer["host"], offer["port"]
    if len(node_id) != 32 or not isinstance(host, str) or not host \
            or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError("the invite names no valid node id and address")
    return node_id, host, port


def _add_bootstrap(home_path: str, host: str, port: int) -> None:
    """The friend's node joins the home's bootstrap list (config.json)."""
    path = os.path.join(home_path, "config.json")
    with open(path) as f:
        config = json.load(f)
    bootstrap = config.get("bootstrap") or []
    if [host, port] not in bootstrap:
        config["bootstrap"] = bootstrap + [[host, port]]
        temp = path + ".tmp"
        with open(temp, "w") as f:
            json.dump(config, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)


def _why(err) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _exchange(reactor, args, code, message: bytes, check=None):
    """Open a wormhole (allocate a code when `code` is None, and print it),
    send `message`, return the other side's. `check` is run on what came
    before we answer: a message we refuse gets no answer."""
    from twisted.internet import defer
    if args.mailbox.startswith("wss:"):
        from flud.lean import allow_package
        allow_package("OpenSSL")   # TLS to the mailbox: twisted's, through pyOpenSSL
    import wormhole

    @defer.inlineCallbacks
    def run():
        w = wormhole.create(APP_ID, args.mailbox, reactor)
        try:
            if code is None:
                w.allocate_code()
                made = yield w.get_code()
                print(f"invite code: {made}", flush=True)
                print("give it to your friend, who runs: flud friends accept --home "
                      f"THEIR_HOME {made}", flush=True)
                w.send_message(message)
                reply = yield w.get_message()
            else:
                w.set_code(code)
                reply = yield w.get_message()
                if check is not None:
                    check(reply)
                w.send_message(message)
            return reply
        finally:
            try:
                yield w.close()
            except Exception:   # the outcome is already decided; closing says nothing new
                pass

    return run().addTimeout(args.timeout, reactor)
