"""Friends' certificates: the user's key vouching for a node (pure).

A certificate says "the holder of user key U trusts node N until T". A
revocation list says "U no longer trusts these nodes" and carries a
sequence: the highest valid one wins. Both are signed by the user's key
(the client home's P-256 identity), and a client that keeps to friends
places only on nodes with a certificate that checks: signed by its own
user key, not expired, not revoked. A forged one (another key, a changed
byte, a wrong node) is refused with a stable code.

Certificate, version 1 (integers big-endian):

    u8  version (1)
    64  issuer public key: the P-256 point x || y
    32  node id
    u64 issued (unix seconds)
    u64 expires (unix seconds)
    u8  signature length, then the DER ECDSA signature over
        CERT_CONTEXT + everything above

Revocation list, version 1:

    u8  version (1)
    64  issuer public key
    u64 sequence
    u64 issued
    u16 count (<= MAX_REVOKED), then count node ids of 32 bytes
    u8  signature length, then the signature over REVOKE_CONTEXT + the above

Pure: no I/O, no clock (callers pass `now`).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from flud.errors import FludError
from flud.keys import Identity

CERT_VERSION = 1
CERT_CONTEXT = b"flud friend certificate v1\x00"
REVOKE_CONTEXT = b"flud friend revocations v1\x00"
MAX_SIGNATURE = 80
MAX_REVOKED = 4096
# A certificate lives a year unless said otherwise; renewing is `friends add` again.
DEFAULT_LIFETIME = 365 * 86400
CLOCK_SLACK = 300

_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004")
_CERT_HEAD = struct.Struct(">B64s32sQQ")
_REVOKE_HEAD = struct.Struct(">B64sQQH")


class CertificateRefused(FludError):
    """A friend's certificate or revocation list that is not taken."""

    code = "CERTIFICATE_REFUSED"

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


# The stable codes, for callers and docs.
CERT_MALFORMED = "CERTIFICATE_MALFORMED"
CERT_BAD_SIGNATURE = "CERTIFICATE_BAD_SIGNATURE"
CERT_WRONG_ISSUER = "CERTIFICATE_WRONG_ISSUER"
CERT_WRONG_NODE = "CERTIFICATE_WRONG_NODE"
CERT_EXPIRED = "CERTIFICATE_EXPIRED"
CERT_REVOKED = "CERTIFICATE_REVOKED"


def _xy(identity_or_der) -> bytes:
    der = identity_or_der.public_der if isinstance(identity_or_der, Identity) else identity_or_der
    if not der.startswith(_SPKI_PREFIX) or len(der) != len(_SPKI_PREFIX) + 64:
        raise ValueError("not a P-256 public key")
    return der[len(_SPKI_PREFIX):]


class _Signed:
    """What a certificate and a revocation list share: the issuer's key, a
    body signed after a context of its own, the wire form (body, signature
    length, signature), signing and checking the signature."""
    __slots__ = ()
    CONTEXT = b""

    @property
    def issuer_der(self) -> bytes:
        return _SPKI_PREFIX + self.issuer_xy

    def encode(self) -> bytes:
        return self.body() + bytes([len(self.signature)]) + self.signature

    def signed_by(self, user: Identity):
        """This record with the user's signature (the issuer must be the user)."""
        return replace(self, signature=user.sign(self.CONTEXT + self.body()))

    def check_signature(self, user_der: bytes, what: str) -> None:
        """CertificateRefused unless the user's key signed it. what: how
        the messages name it."""
        if self.issuer_der != user_der:
            raise CertificateRefused(CERT_WRONG_ISSUER, f"{what} is signed by another key")
        if not Identity.verify(user_der, self.CONTEXT + self.body(), self.signature):
            raise CertificateRefused(CERT_BAD_SIGNATURE, f"{what}: signature does not verify")


@dataclass(frozen=True, slots=True)
class FriendCertificate(_Signed):
    issuer_xy: bytes
    node_id: bytes
    issued: int
    expires: int
    signature: bytes = b""
    CONTEXT = CERT_CONTEXT

    def body(self) -> bytes:
        return _CERT_HEAD.pack(CERT_VERSION, self.issuer_xy, self.node_id, self.issued,
                               self.expires)


@dataclass(frozen=True, slots=True)
class RevocationList(_Signed):
    issuer_xy: bytes
    sequence: int
    issued: int
    revoked: tuple
    signature: bytes = b""
    CONTEXT = REVOKE_CONTEXT

    def body(self) -> bytes:
        return (_REVOKE_HEAD.pack(CERT_VERSION, self.issuer_xy, self.sequence, self.issued,
                                  len(self.revoked)) + b"".join(self.revoked))


def issue_certificate(user: Identity, node_id: bytes, now: float,
                      lifetime: float = DEFAULT_LIFETIME) -> FriendCertificate:
    if len(node_id) != 32:
        raise ValueError("a node id is 32 bytes")
    return FriendCertificate(_xy(user), node_id, int(now), int(now + lifetime)).signed_by(user)


def sign_revocations(user: Identity, revoked, sequence: int, now: float) -> RevocationList:
    revoked = tuple(sorted(set(revoked)))
    if len(revoked) > MAX_REVOKED:
        raise ValueError(f"a revocation list holds at most {MAX_REVOKED} nodes")
    return RevocationList(_xy(user), sequence, int(now), revoked).signed_by(user)


def _signature(data: bytes, pos: int, what: str) -> bytes:
    if pos >= len(data):
        raise CertificateRefused(CERT_MALFORMED, f"{what} is truncated")
    length = data[pos]
    signature = data[pos + 1:pos + 1 + length]
    if len(signature) != length or length > MAX_SIGNATURE:
        raise CertificateRefused(CERT_MALFORMED, f"{what} signature is truncated or too long")
    if pos + 1 + length != len(data):
        raise CertificateRefused(CERT_MALFORMED, f"{what} has trailing bytes")
    return bytes(signature)


def decode_certificate(data: bytes) -> FriendCertificate:
    if len(data) < _CERT_HEAD.size + 1:
        raise CertificateRefused(CERT_MALFORMED, "certificate is truncated")
    version, issuer, node_id, issued, expires = _CERT_HEAD.unpack_from(data)
    if version != CERT_VERSION:
        raise CertificateRefused(CERT_MALFORMED, f"certificate version {version}, "
                                 f"this flud reads {CERT_VERSION}")
    return FriendCertificate(issuer, node_id, issued, expires,
                             _signature(data, _CERT_HEAD.size, "certificate"))


def decode_revocations(data: bytes) -> RevocationList:
    if len(data) < _REVOKE_HEAD.size + 1:
        raise CertificateRefused(CERT_MALFORMED, "revocation list is truncated")
    version, issuer, sequence, issued, count = _REVOKE_HEAD.unpack_from(data)
    if version != CERT_VERSION:
        raise CertificateRefused(CERT_MALFORMED, f"revocation list version {version}, "
                                 f"this flud reads {CERT_VERSION}")
    if count > MAX_REVOKED:
        raise CertificateRefused(CERT_MALFORMED, f"revocation list of {count} nodes, "
                                 f"over {MAX_REVOKED}")
    end = _REVOKE_HEAD.size + 32 * count
    if len(data) < end:
        raise CertificateRefused(CERT_MALFORMED, "revocation list is truncated")
    revoked = tuple(bytes(data[i:i + 32]) for i in range(_REVOKE_HEAD.size, end, 32))
    return RevocationList(issuer, sequence, issued, revoked,
                          _signature(data, end, "revocation list"))


def check_revocations(revocations: RevocationList, user_der: bytes) -> RevocationList:
    """The list if the user's key signed it; else CertificateRefused."""
    revocations.check_signature(user_der, "revocation list")
    return revocations


def check_certificate(cert: FriendCertificate, user_der: bytes, now: float,
                      node_id: bytes = None, revocations: RevocationList = None
                      ) -> FriendCertificate:
    """The certificate if this user's key signed it for `node_id` (when
    given), it is alive now and not revoked; else CertificateRefused with a
    stable code (CERTIFICATE_WRONG_ISSUER, _BAD_SIGNATURE, _WRONG_NODE,
    _EXPIRED, _REVOKED). `revocations` must be checked already."""
    cert.check_signature(user_der, f"certificate for node {cert.node_id.hex()[:12]}")
    if node_id is not None and cert.node_id != node_id:
        raise CertificateRefused(CERT_WRONG_NODE, f"certificate names node "
                                 f"{cert.node_id.hex()[:12]}, not {node_id.hex()[:12]}")
    if cert.expires + CLOCK_SLACK < now:
        raise CertificateRefused(CERT_EXPIRED, f"certificate for node "
                                 f"{cert.node_id.hex()[:12]} expired")
    if revocations is not None and cert.node_id in revocations.revoked \
            and revocations.issued >= cert.issued:
        raise CertificateRefused(CERT_REVOKED, f"node {cert.node_id.hex()[:12]} is revoked")
    return cert
