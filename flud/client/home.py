"""A client home: key pair, user secret, config, local index.

    identity.pem  the client's P-256 key (0600): its owner id on every node
    secret.key    32 random bytes (0600): convergent keys, manifest keys
    config.json   coding parameters and how to find the nodes
    index.sqlite  the local index
    home.id       16 random bytes in hex, made at init: this home's name as
                  the writer of the repository's head (one key, one writer:
                  a home made from the exported key has another id)
"""
import json
import os
import secrets

from flud.chunker import AVERAGE
from flud.client.index import ClientIndex
from flud.errors import FludError

DEFAULTS = {
    "version": 1,
    "k": 4,
    "n": 8,
    "segment_size": 2 * 1024 * 1024,
    "small_file_limit": 1024 * 1024,
    # A large file's content-defined chunks, on average (flud/chunker.py: 256 KiB
    # to 4 MiB around 512 KiB); 0: none, large files go in fixed extents only (a
    # change stores the rest of the extent). A home whose config.json names no
    # chunk_size (made before chunks) takes this one: its old snapshots still
    # restore, its next backups send changed chunks; one that says 0 keeps it.
    "chunk_size": AVERAGE,
    "bootstrap": [],              # [[host, port], ...]
    "testnet": None,              # a testnet directory to read node addresses from
}


class HomeError(FludError):
    """A client home is missing, or its files cannot be read."""

    code = "CLIENT_HOME"


class ClientHome:
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        config_path = os.path.join(self.path, "config.json")
        if not os.path.exists(config_path):
            raise HomeError(f"{self.path} is not a flud client home: run "
                            f"`flud init --home {path} --testnet DIR` first")
        with open(config_path) as f:
            self.config = {**DEFAULTS, **json.load(f)}
        with open(os.path.join(self.path, "secret.key"), "rb") as f:
            self.secret = f.read()
        self._identity = None
        self._index = None
        self._home_id = None

    @property
    def identity(self):
        """The client's key pair, loaded when a job first needs it (`flud ls`
        of the local index never does: the key's libraries are a fixed cost)."""
        if self._identity is None:
            from flud.keys import Identity
            self._identity = Identity.load_or_create(self.path)
        return self._identity

    @property
    def home_id(self) -> str:
        """This home's id (a home made before ids were kept gets one now)."""
        if self._home_id is None:
            self._home_id = load_home_id(self.path)
        return self._home_id

    @property
    def index(self) -> ClientIndex:
        if self._index is None:
            self._index = ClientIndex(os.path.join(self.path, "index.sqlite"))
        return self._index

    def bootstrap(self) -> list:
        """Addresses to ask for the member list, freshest first."""
        addresses = []
        testnet = self.config.get("testnet")
        if testnet:
            path = os.path.join(testnet, "testnet.json")
            try:
                with open(path) as f:
                    addresses += [(n["host"], n["port"]) for n in json.load(f)["nodes"]]
            except FileNotFoundError:
                pass
        addresses += [tuple(a) for a in self.config.get("bootstrap", [])]
        return addresses

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None


HOME_ID_FILE = "home.id"


def load_home_id(path: str) -> str:
    """The home id kept in `path`, made (and kept, crash-safe) if there is none."""
    where = os.path.join(path, HOME_ID_FILE)
    try:
        with open(where) as f:
            home_id = f.read().strip()
    except FileNotFoundError:
        home_id = None
    if home_id is not None:
        if len(home_id) != 32 or not all(c in "0123456789abcdef" for c in home_id):
            raise HomeError(f"{where} is damaged: it should hold 32 hex digits")
        return home_id
    home_id = secrets.token_hex(16)
    temp = where + ".tmp"
    with open(temp, "w") as f:
        f.write(home_id + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, where)
    return home_id


def create_home(path: str, testnet=None, join=None, identity=None, secret=None,
                overrides=None) -> ClientHome:
    from flud.crypto import new_user_secret
    from flud.keys import Identity, write_private_file

    path = os.path.abspath(path)
    if os.path.exists(os.path.join(path, "config.json")):
        raise HomeError(f"{path} already holds a flud client home; use another --home")
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o700)
    identity = identity or Identity.generate()
    identity.save(os.path.join(path, "identity.pem"))
    write_private_file(os.path.join(path, "secret.key"), secret or new_user_secret())
    config = dict(DEFAULTS)
    config.update(overrides or {})
    config["testnet"] = os.path.abspath(testnet) if testnet else None
    config["bootstrap"] = [list(join)] if join else []
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    home = ClientHome(path)
    home.home_id   # made now: a new home, a new writer
    return home
