"""Node and client identity: a P-256 key pair, its node ID, its TLS certificate
and a passphrase-protected export for safekeeping.

An identity's ID is SHA-256 of the DER SubjectPublicKeyInfo of its public key
(docs/DESIGN.md), so anyone holding the public key can check an ID claim.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import struct
from pathlib import Path

from Crypto.Hash import SHA256
from Crypto.PublicKey import ECC
from Crypto.Signature import DSS
from Crypto.Util.asn1 import (
    DerBitString,
    DerInteger,
    DerObject,
    DerBoolean,
    DerObjectId,
    DerOctetString,
    DerSequence,
    DerSetOf,
)

from flud.errors import BadKeyFile, InsecureKeyFile, WrongPassphrase

__all__ = [
    "Identity",
    "BadKeyFile",
    "InsecureKeyFile",
    "WrongPassphrase",
    "IDENTITY_FILENAME",
    "NODE_ID_LENGTH",
    "self_signed_cert_pem",
    "self_signed_cert_der",
    "public_der_of_cert",
    "export_secret_bundle",
    "import_secret_bundle",
    "write_private_file",
]

CURVE = "P-256"
# pycryptodome reports the curve by its long name.
_ACCEPTED_CURVE_NAMES = frozenset({"NIST P-256", "p256", "P-256", "prime256v1", "secp256r1"})
SIGNATURE_MODE = "fips-186-3"
NODE_ID_LENGTH = 32
IDENTITY_FILENAME = "identity.pem"
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_GROUP_OTHER_BITS = 0o077


class Identity:
    """A P-256 private key with its public DER and node ID computed once."""

    __slots__ = ("_key", "public_der", "node_id")

    def __init__(self, private_key: ECC.EccKey):
        if not private_key.has_private():
            raise BadKeyFile("an identity needs a private key, this is only a public key")
        if private_key.curve not in _ACCEPTED_CURVE_NAMES:
            raise BadKeyFile(f"identity keys must be on curve {CURVE}, not {private_key.curve}")
        self._key = private_key
        self.public_der: bytes = private_key.public_key().export_key(format="DER")
        self.node_id: bytes = Identity.node_id_of(self.public_der)

    def __repr__(self) -> str:
        return f"<Identity {self.node_id_hex[:16]}>"

    # --- creation and persistence -------------------------------------------

    @classmethod
    def generate(cls) -> Identity:
        return cls(ECC.generate(curve=CURVE))

    @classmethod
    def from_pem(cls, pem: bytes, source: str = "key") -> Identity:
        try:
            key = _import_key(pem)
        except (ValueError, IndexError, TypeError) as exc:
            raise BadKeyFile(
                f"{source} is not a readable P-256 private key in PEM form ({exc}); "
                "restore it from your exported key bundle"
            ) from None
        return cls(key)

    def private_pem(self) -> bytes:
        """PKCS#8 PEM: also what ssl's load_cert_chain accepts as keyfile."""
        return _p256_private_pem(self._key)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Identity:
        """Read a private key file, refusing one that group or others can read (like ssh)."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise BadKeyFile(f"no key file at {path}") from None
        if stat.S_IMODE(mode) & _GROUP_OTHER_BITS:
            raise InsecureKeyFile(
                f"{path} is readable by other users (mode {stat.S_IMODE(mode):04o}); "
                f"a private key must be private: run `chmod 600 {path}` and try again"
            )
        return cls.from_pem(path.read_bytes(), source=str(path))

    def save(self, path: str | os.PathLike) -> None:
        write_private_file(path, self.private_pem())

    @classmethod
    def load_or_create(cls, home: str | os.PathLike) -> Identity:
        home = Path(home)
        home.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        path = home / IDENTITY_FILENAME
        if path.exists():
            return cls.load(path)
        identity = cls.generate()
        identity.save(path)
        return identity

    # --- IDs and signatures -------------------------------------------------

    @property
    def node_id_hex(self) -> str:
        return self.node_id.hex()

    @staticmethod
    def node_id_of(public_der: bytes) -> bytes:
        # pycryptodome's SHA-256, already loaded for signatures: hashlib (with
        # hmac and secrets) would cost a node 0.7 MB (see flud.lean.spare_for_node)
        return SHA256.new(public_der).digest()

    def sign(self, data: bytes) -> bytes:
        """ECDSA over SHA-256, DER-encoded (the form X.509 and TLS use)."""
        return DSS.new(self._key, SIGNATURE_MODE, encoding="der").sign(SHA256.new(data))

    @staticmethod
    def verify(public_der: bytes, data: bytes, signature: bytes) -> bool:
        """True only for a valid signature by a P-256 key; any malformed input is False."""
        try:
            key = _import_key(public_der)
        except (ValueError, IndexError, TypeError):
            return False
        if key.has_private() or key.curve not in _ACCEPTED_CURVE_NAMES:
            return False
        try:
            DSS.new(key, SIGNATURE_MODE, encoding="der").verify(SHA256.new(data), signature)
        except (ValueError, IndexError, TypeError):
            return False
        return True


# The exact forms pycryptodome exports a P-256 key in: PKCS#8 DER (prefix,
# d, middle, x, y; its PEM has 48 bytes a line) and SubjectPublicKeyInfo DER
# (prefix, x, y). tests/unit/core/test_keys_import.py compares them.
_P256_PKCS8_PREFIX = bytes.fromhex(
    "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420")
_P256_PKCS8_MIDDLE = bytes.fromhex("a14403420004")
_P256_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004")
_PEM_PRIVATE_KEY = (b"-----BEGIN PRIVATE KEY-----\n", b"\n-----END PRIVATE KEY-----")


def _p256_private_pem(key: ECC.EccKey) -> bytes:
    """key.export_key(format="PEM", use_pkcs8=True), byte for byte, for a
    P-256 key, without Crypto.IO.PEM and PKCS8: they import AES, DES, 3DES,
    MD5, CMAC, SHA-1 and the KDFs, 0.6 MB of RSS in every node (flud.lean
    leaves them lazy; pycryptodome's DSA imports them for its own PEM keys)."""
    if key.curve not in _ACCEPTED_CURVE_NAMES or not key.has_private():
        return key.export_key(format="PEM", use_pkcs8=True).encode("ascii")
    der = b"".join((_P256_PKCS8_PREFIX, int(key.d).to_bytes(32, "big"), _P256_PKCS8_MIDDLE,
                    int(key.pointQ.x).to_bytes(32, "big"), int(key.pointQ.y).to_bytes(32, "big")))
    begin, end = _PEM_PRIVATE_KEY
    lines = b"".join(binascii.b2a_base64(der[i:i + 48]) for i in range(0, len(der), 48))
    return begin + lines + end[1:]


def _import_key(encoded: bytes) -> ECC.EccKey:
    """ECC.import_key, without building pycryptodome's ten curves.

    ECC.import_key finds the curve by iterating over all the curves it
    knows, which builds each (P-192 to P-521, Ed25519, Ed448, X25519, X448,
    secp256k1) and keeps them: 1.0 MB of RSS in every node and client, which
    import keys (their own at start-up, every peer's in HELLO). The forms
    pycryptodome itself exports for P-256 keys (all flud writes) are built
    with ECC.construct on P-256 alone; the result is kept only if exporting
    it (as pycryptodome does, see _p256_private_pem) gives back exactly the
    input, so it is the key ECC.import_key would return. Anything else goes
    to ECC.import_key, errors included."""
    try:
        key = _construct_exported_p256(encoded)
    except (ValueError, IndexError, TypeError):
        key = None
    return key if key is not None else ECC.import_key(encoded)


def _construct_exported_p256(encoded: bytes):
    if len(encoded) == len(_P256_SPKI_PREFIX) + 64 and encoded.startswith(_P256_SPKI_PREFIX):
        xy = encoded[len(_P256_SPKI_PREFIX):]
        key = ECC.construct(curve=CURVE, point_x=int.from_bytes(xy[:32], "big"),
                            point_y=int.from_bytes(xy[32:], "big"))
        return key if key.export_key(format="DER") == encoded else None
    begin, end = _PEM_PRIVATE_KEY
    if encoded.startswith(begin) and encoded.endswith(end):
        der = base64.b64decode(encoded[len(begin):-len(end)].replace(b"\n", b""), validate=True)
        d_at = len(_P256_PKCS8_PREFIX)
        xy_at = d_at + 32 + len(_P256_PKCS8_MIDDLE)
        if (len(der) != xy_at + 64 or not der.startswith(_P256_PKCS8_PREFIX)
                or der[d_at + 32:xy_at] != _P256_PKCS8_MIDDLE):
            return None
        key = ECC.construct(curve=CURVE, d=int.from_bytes(der[d_at:d_at + 32], "big"),
                            point_x=int.from_bytes(der[xy_at:xy_at + 32], "big"),
                            point_y=int.from_bytes(der[xy_at + 32:], "big"))
        return key if _p256_private_pem(key) == encoded else None
    return None


def write_private_file(path: str | os.PathLike, data: bytes) -> None:
    """Write data so that it is never visible half-written nor readable by others.

    Temp file created 0600 (never widened by umask), fsynced, renamed over the
    target, then the directory fsynced so the rename survives a crash.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")  # secrets.token_hex(4)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --- self-signed TLS certificate ----------------------------------------------

_OID_ECDSA_WITH_SHA256 = "1.2.840.10045.4.3.2"
_OID_COMMON_NAME = "2.5.4.3"
_OID_BASIC_CONSTRAINTS = "2.5.29.19"
_OID_KEY_USAGE = "2.5.29.15"
_TAG_UTF8_STRING = 0x0C
_TAG_UTC_TIME = 0x17
_TAG_GENERALIZED_TIME = 0x18
_TAG_BIT_STRING = 0x03
_X509_VERSION_3 = 2
# RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050 on.
_NOT_BEFORE = DerObject(_TAG_UTC_TIME, b"000101000000Z")
_NOT_AFTER = DerObject(_TAG_GENERALIZED_TIME, b"20991231235959Z")
_SERIAL_BYTES = 16
_COMMON_NAME_ID_CHARS = 16
# KeyUsage BIT STRING: 7 unused bits, then digitalSignature (bit 0), all the
# TLS handshake needs. Not a CA, yet a peer can still pin it as its own anchor.
_KEY_USAGE_BITS = bytes([0x07, 0b1000_0000])
_PEM_LINE_CHARS = 64


def _common_name(identity: Identity) -> DerSequence:
    attribute = DerSequence(
        [
            DerObjectId(_OID_COMMON_NAME),
            DerObject(_TAG_UTF8_STRING, f"flud {identity.node_id_hex[:_COMMON_NAME_ID_CHARS]}".encode()),
        ]
    )
    return DerSequence([DerSetOf([attribute.encode()])])


def _extensions() -> DerSequence:
    critical = True
    basic_constraints = DerSequence(
        [DerObjectId(_OID_BASIC_CONSTRAINTS), DerBoolean(critical), DerOctetString(DerSequence([]).encode())]
    )
    key_usage = DerSequence(
        [
            DerObjectId(_OID_KEY_USAGE),
            DerBoolean(critical),
            DerOctetString(DerObject(_TAG_BIT_STRING, _KEY_USAGE_BITS).encode()),
        ]
    )
    return DerSequence([basic_constraints, key_usage], explicit=3)


def self_signed_cert_der(identity: Identity) -> bytes:
    """A minimal X.509 v3 certificate for the identity's key, signed by itself.

    Deterministic: the same identity always gives the same bytes.
    """
    algorithm = DerSequence([DerObjectId(_OID_ECDSA_WITH_SHA256)])
    name = _common_name(identity)
    serial = int.from_bytes(identity.node_id[:_SERIAL_BYTES], "big") or 1
    tbs = DerSequence(
        [
            DerInteger(_X509_VERSION_3, explicit=0),
            DerInteger(serial),
            algorithm,
            name,
            DerSequence([_NOT_BEFORE, _NOT_AFTER]),
            name,
            identity.public_der,
            _extensions(),
        ]
    ).encode()
    # RFC 6979 signing: the same key always yields the same certificate bytes,
    # so a peer can pin them.
    signature = DSS.new(identity._key, "deterministic-rfc6979", encoding="der").sign(SHA256.new(tbs))
    return DerSequence([tbs, algorithm, DerBitString(signature)]).encode()


def self_signed_cert_pem(identity: Identity) -> bytes:
    return _pem("CERTIFICATE", self_signed_cert_der(identity))


def _pem(label: str, der: bytes) -> bytes:
    body = base64.b64encode(der)
    lines = [body[i : i + _PEM_LINE_CHARS] for i in range(0, len(body), _PEM_LINE_CHARS)]
    return b"\n".join([f"-----BEGIN {label}-----".encode(), *lines, f"-----END {label}-----".encode(), b""])


def public_der_of_cert(cert_der: bytes) -> bytes:
    """The SubjectPublicKeyInfo DER of an X.509 certificate, exactly as encoded in it.

    A peer's node ID is node_id_of() of this. Raises BadKeyFile on anything
    that is not a certificate.
    """
    try:
        tbs_der = DerSequence().decode(cert_der, strict=True)[0]
        tbs = DerSequence().decode(tbs_der, strict=True)
        # version [0] EXPLICIT is optional; without it, SPKI moves up one place.
        has_version = isinstance(tbs[0], bytes) and tbs[0][:1] == b"\xa0"
        spki = tbs[6 if has_version else 5]
        if not isinstance(spki, bytes):
            raise ValueError("SubjectPublicKeyInfo is not a SEQUENCE")
        DerSequence().decode(spki, strict=True)
    except (ValueError, IndexError, TypeError, EOFError) as exc:
        raise BadKeyFile(f"not an X.509 certificate: {exc}") from None
    return spki


# --- passphrase-protected export ----------------------------------------------

BUNDLE_MAGIC = b"FLUDKEY1"
SCRYPT_LOG2_N = 15  # ~130 ms here: slow for guessing, quick for a person
SCRYPT_R = 8
SCRYPT_P = 1
_SCRYPT_LOG2_N_RANGE = range(10, 21)  # refuse crafted files that would take minutes
_SCRYPT_R_RANGE = range(1, 17)
_SCRYPT_P_RANGE = range(1, 5)
_SALT_LENGTH = 16
_NONCE_LENGTH = 12
_TAG_LENGTH = 16
_CHECK_LENGTH = 16
_CIPHER_KEY_LENGTH = 32
# magic | log2 N, r, p | salt | passphrase check | nonce
_HEADER = struct.Struct(f"!{len(BUNDLE_MAGIC)}sBBB{_SALT_LENGTH}s{_CHECK_LENGTH}s{_NONCE_LENGTH}s")
_PEM_LENGTH = struct.Struct("!I")


def _stretch(passphrase: str, salt: bytes, log2_n: int, r: int, p: int) -> tuple[bytes, bytes]:
    """scrypt -> (cipher key, passphrase check).

    The check value tells a wrong passphrase apart from a damaged file; it
    gives a guesser nothing the GCM tag would not.
    """
    # Imported here, as AES below: only key export and import use them (with
    # Crypto.IO.PEM and PKCS8 left lazy by flud.lean, see _p256_private_pem,
    # a node never loads them).
    from Crypto.Protocol.KDF import scrypt
    out = scrypt(passphrase.encode("utf-8"), salt, _CIPHER_KEY_LENGTH + _CHECK_LENGTH, N=1 << log2_n, r=r, p=p)
    return out[:_CIPHER_KEY_LENGTH], out[_CIPHER_KEY_LENGTH:]


def export_secret_bundle(identity: Identity, user_secret: bytes, passphrase: str) -> bytes:
    """Everything needed to restore from nothing, sealed under a passphrase."""
    import secrets
    salt = secrets.token_bytes(_SALT_LENGTH)
    nonce = secrets.token_bytes(_NONCE_LENGTH)
    key, check = _stretch(passphrase, salt, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P)
    header = _HEADER.pack(BUNDLE_MAGIC, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P, salt, check, nonce)
    pem = identity.private_pem()
    from Crypto.Cipher import AES
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG_LENGTH)
    cipher.update(header)  # the header is authenticated too
    ciphertext, tag = cipher.encrypt_and_digest(_PEM_LENGTH.pack(len(pem)) + pem + user_secret)
    return header + ciphertext + tag


def import_secret_bundle(blob: bytes, passphrase: str) -> tuple[Identity, bytes]:
    """Returns (identity, user_secret); raises WrongPassphrase or BadKeyFile."""
    import secrets
    damaged = "the key bundle is damaged ({}); use another copy of your exported key"
    if len(blob) < _HEADER.size + _TAG_LENGTH:
        raise BadKeyFile(damaged.format("too short"))
    magic, log2_n, r, p, salt, check, nonce = _HEADER.unpack_from(blob)
    if magic != BUNDLE_MAGIC:
        raise BadKeyFile("this is not a flud key bundle (no FLUDKEY1 header); check that you picked the right file")
    if log2_n not in _SCRYPT_LOG2_N_RANGE or r not in _SCRYPT_R_RANGE or p not in _SCRYPT_P_RANGE:
        raise BadKeyFile(damaged.format("impossible key stretching parameters"))
    key, expected_check = _stretch(passphrase, salt, log2_n, r, p)
    if not secrets.compare_digest(check, expected_check):
        raise WrongPassphrase("wrong passphrase for this key bundle; check the keyboard layout and caps lock, and try again")
    header, body = blob[: _HEADER.size], blob[_HEADER.size :]
    from Crypto.Cipher import AES
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG_LENGTH)
    cipher.update(header)
    try:
        plaintext = cipher.decrypt_and_verify(body[:-_TAG_LENGTH], body[-_TAG_LENGTH:])
    except ValueError:
        raise BadKeyFile(damaged.format("its contents fail their integrity check")) from None
    if len(plaintext) < _PEM_LENGTH.size:
        raise BadKeyFile(damaged.format("no key inside"))
    (pem_length,) = _PEM_LENGTH.unpack_from(plaintext)
    pem_end = _PEM_LENGTH.size + pem_length
    if pem_end > len(plaintext):
        raise BadKeyFile(damaged.format("inconsistent lengths"))
    identity = Identity.from_pem(plaintext[_PEM_LENGTH.size : pem_end], source="the key bundle")
    return identity, plaintext[pem_end:]
