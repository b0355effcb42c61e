"""A node named on the command line: by its id in hex, or by its home."""
import json
import os


def node_id_of(text: str) -> bytes:
    try:
        node_id = bytes.fromhex(text)
    except ValueError:
        node_id = b""
    if len(node_id) != 32:
        raise ValueError(f"{text!r} is not a node id (64 hex digits)")
    return node_id


def node_id_of_home(path: str) -> bytes:
    """A node home's id, from its node.json (a running node) or its key."""
    try:
        with open(os.path.join(path, "node.json")) as f:
            return bytes.fromhex(json.load(f)["node_id"])
    except (OSError, ValueError, KeyError):
        pass
    from flud.keys import Identity
    key = os.path.join(path, "identity.pem")
    if not os.path.exists(key):
        raise ValueError(f"{path} holds no node (no node.json, no identity.pem)")
    return Identity.load(key).node_id
