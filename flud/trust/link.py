"""A link: a client owner's key and a node's key, each signing that the node
is the owner's (docs/quotas.md).

A node that holds data for owner O counts, towards O's credit, what O's
linked nodes hold for it (flud/trust/ledger.py). The link says which nodes
those are, and both keys sign it: the owner's (so nobody can link a node to
an owner it is not), and the node's (so nobody can name a node that is not
theirs as the one they give through). One signature alone is refused.

Layout (version 1), every field length-prefixed, big-endian:

    u8  version (1)
    u16 len + owner public key (DER SubjectPublicKeyInfo, P-256)
    u16 len + node public key
    u64 created (unix seconds)
    u8  len + owner signature (over body())
    u8  len + node signature  (over body())

Pure: no I/O; the keys module checks the signatures.
"""
import struct
from dataclasses import dataclass

from flud.errors import FludError
from flud.keys import Identity

LINK_VERSION = 1
LINK_DOMAIN = b"flud-link-v1\0"
MAX_PUBLIC_KEY = 256
MAX_SIGNATURE = 160
MAX_LINK = 1 + 2 * (2 + MAX_PUBLIC_KEY) + 8 + 2 * (1 + MAX_SIGNATURE)

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class LinkRefused(FludError):
    """A link record that is malformed, half signed or forged. `code` is one
    of LINK_MALFORMED, LINK_HALF_SIGNED, LINK_FORGED (stable)."""

    code = "LINK_REFUSED"

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True)
class LinkRecord:
    owner_public: bytes
    node_public: bytes
    created: int
    owner_signature: bytes = b""
    node_signature: bytes = b""

    @property
    def owner_id(self) -> bytes:
        return Identity.node_id_of(self.owner_public)

    @property
    def node_id(self) -> bytes:
        return Identity.node_id_of(self.node_public)

    def body(self) -> bytes:
        """What both keys sign."""
        return (LINK_DOMAIN + _U16.pack(len(self.owner_public)) + self.owner_public
                + _U16.pack(len(self.node_public)) + self.node_public + _U64.pack(self.created))

    def encode(self) -> bytes:
        return (_U8.pack(LINK_VERSION)
                + _U16.pack(len(self.owner_public)) + self.owner_public
                + _U16.pack(len(self.node_public)) + self.node_public
                + _U64.pack(self.created)
                + _U8.pack(len(self.owner_signature)) + self.owner_signature
                + _U8.pack(len(self.node_signature)) + self.node_signature)


def sign_link(owner: Identity, node: Identity, created: int) -> LinkRecord:
    """A link signed by both keys (`flud link` holds both: the client home's
    and the node home's)."""
    unsigned = LinkRecord(owner.public_der, node.public_der, int(created))
    body = unsigned.body()
    return LinkRecord(owner.public_der, node.public_der, int(created),
                      owner.sign(body), node.sign(body))


def decode_link(raw: bytes) -> LinkRecord:
    """Bytes -> LinkRecord, its layout checked (not its signatures:
    check_link does that). LinkRefused(LINK_MALFORMED) for anything else."""
    reader = _Reader(raw)
    version = reader.u8()
    if version != LINK_VERSION:
        raise LinkRefused("LINK_MALFORMED", f"link version {version} is not known (1 is)")
    owner_public = reader.take(reader.u16(), MAX_PUBLIC_KEY, "owner key")
    node_public = reader.take(reader.u16(), MAX_PUBLIC_KEY, "node key")
    created = reader.u64()
    owner_signature = reader.take(reader.u8(), MAX_SIGNATURE, "owner signature")
    node_signature = reader.take(reader.u8(), MAX_SIGNATURE, "node signature")
    if reader.left():
        raise LinkRefused("LINK_MALFORMED", f"{reader.left()} bytes after the link")
    return LinkRecord(owner_public, node_public, created, owner_signature, node_signature)


def check_link(link: LinkRecord) -> LinkRecord:
    """The link, if both signatures are there and good; else LinkRefused."""
    if link.owner_public == link.node_public:
        raise LinkRefused("LINK_MALFORMED", "a link names two different keys")
    if not link.owner_signature or not link.node_signature:
        missing = "owner" if not link.owner_signature else "node"
        raise LinkRefused("LINK_HALF_SIGNED", f"the link has no {missing} signature; "
                                              f"both keys must sign it (`flud link`)")
    body = link.body()
    for who, public, signature in (("owner", link.owner_public, link.owner_signature),
                                   ("node", link.node_public, link.node_signature)):
        if not Identity.verify(public, body, signature):
            raise LinkRefused("LINK_FORGED", f"the {who} signature does not match the {who} key")
    return link


def read_link(raw: bytes) -> LinkRecord:
    """decode_link then check_link: what a node does with a link it is sent."""
    if len(raw) > MAX_LINK:
        raise LinkRefused("LINK_MALFORMED", f"a link of {len(raw)} bytes is over {MAX_LINK}")
    return check_link(decode_link(raw))


class _Reader:
    def __init__(self, raw: bytes):
        self.raw, self.at = bytes(raw), 0

    def _get(self, n: int) -> bytes:
        if self.at + n > len(self.raw):
            raise LinkRefused("LINK_MALFORMED", "the link ends early")
        piece = self.raw[self.at:self.at + n]
        self.at += n
        return piece

    def u8(self) -> int:
        return _U8.unpack(self._get(1))[0]

    def u16(self) -> int:
        return _U16.unpack(self._get(2))[0]

    def u64(self) -> int:
        return _U64.unpack(self._get(8))[0]

    def take(self, n: int, limit: int, what: str) -> bytes:
        if n > limit:
            raise LinkRefused("LINK_MALFORMED", f"the {what} is {n} bytes, over {limit}")
        return self._get(n)

    def left(self) -> int:
        return len(self.raw) - self.at
