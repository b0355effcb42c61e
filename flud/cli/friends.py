"""`flud friends add | list | revoke | only | invite | accept`: the nodes this
home's user key vouches for, and whether the home stores on them alone
(docs/trust.md)."""
import json
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_OK
from flud.cli.node_ids import node_id_of, node_id_of_home

DAY = 86400


def add_friends_command(sub) -> None:
    friends = sub.add_parser("friends", help="friends' grid: certify the nodes you trust, "
                                             "keep a home to them").add_subparsers(
        dest="action", required=True)

    add = friends.add_parser("add", help="certify a node with this home's key")
    add.add_argument("--home", required=True)
    which = add.add_mutually_exclusive_group(required=True)
    which.add_argument("node", nargs="?", help="the node id (64 hex digits)")
    which.add_argument("--node-home", help="a node's home directory on this machine")
    which.add_argument("--certificate", help="a certificate this key signed (hex), "
                                             "e.g. from another home of the same key")
    add.add_argument("--name", default="", help="a name to show in `friends list`")
    add.add_argument("--days", type=int, default=365, help="valid for this many days "
                                                           "(default 365)")
    add.set_defaults(handler=cmd_add)

    listed = friends.add_parser("list", help="the certified nodes, and whether each checks")
    listed.add_argument("--home", required=True)
    listed.add_argument("--json", action="store_true")
    listed.set_defaults(handler=cmd_list)

    revoke = friends.add_parser("revoke", help="withdraw a node's certificate (signed "
                                               "revocation list)")
    revoke.add_argument("--home", required=True)
    revoke.add_argument("node", help="the node id (64 hex digits)")
    revoke.set_defaults(handler=cmd_revoke)

    only = friends.add_parser("only", help="on: place shares on certified nodes only; "
                                           "off: on any node")
    only.add_argument("--home", required=True)
    only.add_argument("state", choices=("on", "off"))
    only.set_defaults(handler=cmd_only)

    from flud.cli.friends_invite import add_invite_commands
    add_invite_commands(friends)


def _fail(message, code=None) -> int:
    print(f"error: {message}" + (f" [{code}]" if code else ""), file=sys.stderr)
    return EXIT_ERROR


def _store(args):
    from flud.cli.home import open_home
    from flud.client.friends_store import FriendsStore

    home = open_home(args.home)
    if home is None:
        return None, None
    return home, FriendsStore(home.path, home.identity)


def cmd_add(args) -> int:
    from flud.errors import FludError
    from flud.trust.certificates import CertificateRefused

    home, store = _store(args)
    if store is None:
        return EXIT_ERROR
    try:
        if args.certificate:
            cert = store.add_certificate(bytes.fromhex(args.certificate.strip()), time.time(),
                                         args.name)
        else:
            node_id = node_id_of_home(args.node_home) if args.node_home else node_id_of(args.node)
            cert = store.add(node_id, time.time(), args.days * DAY, args.name)
    except CertificateRefused as err:
        return _fail(err, err.code)
    except (ValueError, FludError) as err:
        return _fail(err, getattr(err, "code", None))
    finally:
        home.close()
    print(f"certified node {cert.node_id.hex()} until "
          f"{time.strftime('%Y-%m-%d', time.gmtime(cert.expires))}"
          + ("" if store.friends_only else
             " (this home stores on any node: `flud friends only on` keeps it to friends)"))
    print(f"certificate: {cert.encode().hex()}")
    return EXIT_OK


def cmd_list(args) -> int:
    home, store = _store(args)
    if store is None:
        return EXIT_ERROR
    home.close()
    rows = []
    for node_hex, name, cert, refused in store.entries(time.time()):
        rows.append({"node_id": node_hex, "name": name, "valid": cert is not None,
                     "expires": cert.expires if cert else None, "refused": refused})
    if args.json:
        print(json.dumps({"friends_only": store.friends_only, "friends": rows}))
        return EXIT_OK
    print(f"friends only: {'on' if store.friends_only else 'off'}")
    if not rows:
        print("no certified nodes (`flud friends add` or `flud friends accept CODE`)")
    for row in rows:
        state = (f"until {time.strftime('%Y-%m-%d', time.gmtime(row['expires']))}"
                 if row["valid"] else f"REFUSED ({row['refused']})")
        print(f"{row['node_id']}  {state}  {row['name']}")
    return EXIT_OK


def cmd_revoke(args) -> int:
    from flud.trust.certificates import CertificateRefused

    home, store = _store(args)
    if store is None:
        return EXIT_ERROR
    try:
        node_id = node_id_of(args.node)
        store.revoke(node_id, time.time())
    except CertificateRefused as err:
        return _fail(err, err.code)
    except ValueError as err:
        return _fail(err)
    finally:
        home.close()
    print(f"revoked node {node_id.hex()}: it takes no new share"
          + ("; `flud check --repair` moves its shares to certified nodes"
             if store.friends_only else ""))
    return EXIT_OK


def cmd_only(args) -> int:
    home, store = _store(args)
    if store is None:
        return EXIT_ERROR
    home.close()
    store.set_friends_only(args.state == "on")
    count = len(store.trusted(time.time()))
    print(f"friends only: {args.state} ({count} certified nodes)")
    return EXIT_OK
