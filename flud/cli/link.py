"""`flud link --home H --node-home DIR`: link a client home to a node its
user runs (docs/quotas.md). Both keys sign one record; it is written into
the node's home (the node reads it at its next ledger round and pushes it
to its peers) and into the client home, for the record."""
import json
import os
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_OK


def add_link_command(sub) -> None:
    link = sub.add_parser("link", help="link a client home to a node you run (give to get)")
    link.add_argument("--home", required=True, help="the client home (its key is the owner)")
    link.add_argument("--node-home", required=True, metavar="DIR",
                      help="the home of a node you run (`flud node run --home DIR`)")
    link.add_argument("--json", action="store_true", help="print the result as JSON")
    link.set_defaults(handler=cmd_link)


def _identity(home: str, what: str):
    from flud.keys import IDENTITY_FILENAME, Identity
    path = os.path.join(home, IDENTITY_FILENAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{home} holds no {IDENTITY_FILENAME}: is it {what}?")
    return Identity.load(path)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = path + ".tmp"
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def cmd_link(args) -> int:
    from flud.errors import FludError
    from flud.node.quota import LINK_SUFFIX, own_links_dir
    from flud.trust.link import read_link, sign_link
    try:
        owner = _identity(args.home, "a client home (`flud init`)")
        node = _identity(args.node_home, "a node home (`flud node run --home DIR`)")
    except (OSError, FludError) as err:
        print(f"flud link: {err}", file=sys.stderr)
        return EXIT_ERROR
    if owner.node_id == node.node_id:
        print("flud link: the client home and the node home hold the same key", file=sys.stderr)
        return EXIT_ERROR
    raw = sign_link(owner, node, int(time.time())).encode()
    read_link(raw)    # what every node will check
    node_path = os.path.join(own_links_dir(args.node_home), owner.node_id.hex() + LINK_SUFFIX)
    client_path = os.path.join(args.home, "links", node.node_id.hex() + LINK_SUFFIX)
    _write(node_path, raw)
    _write(client_path, raw)
    result = {"owner": owner.node_id.hex(), "node": node.node_id.hex(),
              "node_file": node_path, "client_file": client_path}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"linked: owner {result['owner'][:16]} runs node {result['node'][:16]}\n"
              f"  the node reads {node_path} at its next ledger round and tells its peers;\n"
              f"  their spot checks of the space it holds for them then earn this home credit")
    return EXIT_OK
