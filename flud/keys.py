"""Node and client identity: a P-256 key pair, its node ID, its TLS certificate
and a passphrase-protected export for safekeeping.

An identity's ID is SHA-256 of the DER SubjectPublicKeyInfo of its public key
(docs/DESIGN.md), so anyone holding the public key can check an ID claim.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
import struct
from pathlib import Path

from flud import libcrypto
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
    "export_secret_bundle",
    "import_secret_bundle",
    "write_private_file",
]

NODE_ID_LENGTH = 32
IDENTITY_FILENAME = "identity.pem"
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_GROUP_OTHER_BITS = 0o077


class Identity:
    """A P-256 private key with its public DER and node ID computed once."""

    __slots__ = ("_key", "public_der", "node_id")

    def __init__(self, private_key: libcrypto.P256Key):
        self._key = private_key
        self.public_der: bytes = _P256_SPKI_PREFIX + b"".join(private_key.public_xy())
        self.node_id: bytes = Identity.node_id_of(self.public_der)

    def __repr__(self) -> str:
        return f"<Identity {self.node_id_hex[:16]}>"

    # --- creation and persistence -------------------------------------------

    @classmethod
    def generate(cls) -> Identity:
        return cls(libcrypto.P256Key.generate())

    @classmethod
    def from_pem(cls, pem: bytes, source: str = "key") -> Identity:
        """A PKCS#8 ("PRIVATE KEY", what flud writes) or SEC1 ("EC PRIVATE
        KEY") PEM private key on P-256; BadKeyFile for anything else."""
        try:
            key = libcrypto.P256Key.from_der(_pem_private_der(pem))
        except (ValueError, TypeError) as exc:  # UnsupportedKey and binascii.Error are ValueErrors
            raise BadKeyFile(
                f"{source} is not a readable P-256 private key in PEM form ({exc}); "
                "restore it from your exported key bundle"
            ) from None
        return cls(key)

    @classmethod
    def from_private_scalar(cls, d: bytes) -> Identity:
        """The identity whose private key is the 32-byte scalar d (a paper
        key holds only d: the public point is computed from it)."""
        if len(d) != 32:
            raise BadKeyFile(f"a P-256 private key is 32 bytes, not {len(d)}")
        sec1 = bytes.fromhex("30250201010420") + d      # ECPrivateKey, no public key
        body = (bytes.fromhex("020100") + _P256_PKCS8_PREFIX[6:27]
                + b"\x04" + bytes([len(sec1)]) + sec1)
        try:
            return cls(libcrypto.P256Key.from_der(b"\x30" + bytes([len(body)]) + body))
        except (ValueError, TypeError) as exc:
            raise BadKeyFile(f"not a P-256 private key ({exc})") from None

    def private_d(self) -> bytes:
        return self._key.private_d()

    def private_pem(self) -> bytes:
        """PKCS#8 PEM: also what ssl's load_cert_chain accepts as keyfile."""
        return _p256_private_pem(self._key.private_d(), *self._key.public_xy())

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
        # libcrypto's SHA-256: hashlib (with hmac and secrets) would cost a node 0.7 MB
        return libcrypto.sha256(public_der)

    def sign(self, data: bytes) -> bytes:
        """ECDSA over SHA-256, DER-encoded (the form X.509 and TLS use)."""
        return self._key.sign(data)

    @staticmethod
    def verify(public_der: bytes, data: bytes, signature: bytes) -> bool:
        """True only for a valid signature by a P-256 key in flud's one form
        (uncompressed point, see _P256_SPKI_PREFIX); anything else is False.

        The node ID is the hash of these bytes, so one key must have one
        encoding: a compressed point (or any other DER of the same key)
        would give the same key a second ID."""
        try:
            public_der = bytes(public_der)
        except TypeError:
            return False
        if len(public_der) != _P256_SPKI_LENGTH or not public_der.startswith(_P256_SPKI_PREFIX):
            return False
        return libcrypto.verify(public_der, data, signature)


# The forms flud writes a P-256 key in (those pycryptodome exported, which
# wrote every existing identity.pem): PKCS#8 DER (prefix, d, middle, x, y; its
# PEM has 48 bytes a line) and SubjectPublicKeyInfo DER (prefix, x, y), both
# with the uncompressed point. tests/unit/core/test_keys_compat.py compares them.
_P256_PKCS8_PREFIX = bytes.fromhex(
    "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420")
_P256_PKCS8_MIDDLE = bytes.fromhex("a14403420004")
_P256_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004")
_P256_SPKI_LENGTH = len(_P256_SPKI_PREFIX) + 2 * 32
_PEM_PRIVATE_LABELS = (b"PRIVATE KEY", b"EC PRIVATE KEY")


def _p256_private_pem(d: bytes, x: bytes, y: bytes) -> bytes:
    der = b"".join((_P256_PKCS8_PREFIX, d, _P256_PKCS8_MIDDLE, x, y))
    return _pem("PRIVATE KEY", der).rstrip(b"\n")  # no final newline, as written so far


def _pem_private_der(pem: bytes) -> bytes:
    """The DER inside one PEM private key block (whitespace around is fine)."""
    text = pem.strip()
    for label in _PEM_PRIVATE_LABELS:
        begin, end = b"-----BEGIN " + label + b"-----", b"-----END " + label + b"-----"
        if text.startswith(begin) and text.endswith(end):
            # validate: no headers (encrypted keys), nothing but base64
            return base64.b64decode(b"".join(text[len(begin):-len(end)].split()), validate=True)
    raise ValueError("no PEM private key block")


def write_private_file(path: str | os.PathLike, data: bytes, replace: bool = True) -> None:
    """Write data so that it is never visible half-written nor readable by others.

    Temp file created 0600 (never widened by umask), fsynced, renamed over the
    target, then the directory fsynced so the rename survives a crash.
    replace=False: FileExistsError if anything (a symlink included) has the
    name, checked by the kernel as the file takes it (a hard link, not a
    rename), so nothing made meanwhile is overwritten either.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")  # secrets.token_hex(4)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(temp, path)
        else:
            _link_new(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _link_new(temp: Path, path: Path) -> None:
    try:
        os.link(temp, path, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: checked, then renamed
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "file exists", str(path)) from None
        os.replace(temp, path)


# --- self-signed TLS certificate ----------------------------------------------

# A few DER encoders, enough for the one certificate flud makes.
_SEQUENCE, _SET, _INTEGER, _OID, _BIT_STRING, _OCTET_STRING, _BOOLEAN = 0x30, 0x31, 0x02, 0x06, 0x03, 0x04, 0x01
_UTF8_STRING, _UTC_TIME, _GENERALIZED_TIME, _CONTEXT_CONSTRUCTED = 0x0C, 0x17, 0x18, 0xA0


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes((tag, n)) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + content


def _sequence(*items: bytes) -> bytes:
    return _der(_SEQUENCE, b"".join(items))


def _integer(value: int) -> bytes:
    # non-negative: one more byte than the bits need keeps the sign bit clear,
    # and is minimal (a leading zero only before a set top bit)
    return _der(_INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(arc) for arc in dotted.split("."))
    body = bytearray()
    for arc in (40 * first + second, *rest):
        chunk = [arc & 0x7F]
        while arc > 0x7F:
            arc >>= 7
            chunk.append(0x80 | (arc & 0x7F))
        body += bytes(reversed(chunk))
    return _der(_OID, bytes(body))


_ECDSA_WITH_SHA256 = _sequence(_oid("1.2.840.10045.4.3.2"))
_OID_COMMON_NAME = _oid("2.5.4.3")
_X509_VERSION_3 = _der(_CONTEXT_CONSTRUCTED | 0, _integer(2))
# RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050 on.
_VALIDITY = _sequence(_der(_UTC_TIME, b"000101000000Z"), _der(_GENERALIZED_TIME, b"20991231235959Z"))
_CRITICAL = _der(_BOOLEAN, b"\xff")
# basicConstraints (empty: not a CA, yet a peer can still pin it as its own
# anchor) and keyUsage, a BIT STRING of 7 unused bits then digitalSignature
# (bit 0), all the TLS handshake needs; both critical, as [3] EXPLICIT.
_EXTENSIONS = _der(_CONTEXT_CONSTRUCTED | 3, _sequence(
    _sequence(_oid("2.5.29.19"), _CRITICAL, _der(_OCTET_STRING, _sequence())),
    _sequence(_oid("2.5.29.15"), _CRITICAL, _der(_OCTET_STRING, _der(_BIT_STRING, bytes((0x07, 0x80))))),
))
_SERIAL_BYTES = 16
_COMMON_NAME_ID_CHARS = 16
_PEM_LINE_CHARS = 64


def self_signed_cert_der(identity: Identity) -> bytes:
    """A minimal X.509 v3 certificate for the identity's key, signed by itself.

    Everything but the signature is the same for the same identity; ECDSA
    signs with a random k, so two calls give different bytes. Nothing needs
    them equal: the certificate is written once beside the key
    (tls-cert.pem), and peers identify a node by its key (HELLO), not by
    these bytes.
    """
    common_name = f"flud {identity.node_id_hex[:_COMMON_NAME_ID_CHARS]}".encode()
    name = _sequence(_der(_SET, _sequence(_OID_COMMON_NAME, _der(_UTF8_STRING, common_name))))
    serial = int.from_bytes(identity.node_id[:_SERIAL_BYTES], "big") or 1
    tbs = _sequence(_X509_VERSION_3, _integer(serial), _ECDSA_WITH_SHA256, name, _VALIDITY, name,
                    identity.public_der, _EXTENSIONS)
    signature = identity.sign(tbs)
    return _sequence(tbs, _ECDSA_WITH_SHA256, _der(_BIT_STRING, b"\0" + signature))


def self_signed_cert_pem(identity: Identity) -> bytes:
    return _pem("CERTIFICATE", self_signed_cert_der(identity))


def _pem(label: str, der: bytes) -> bytes:
    body = base64.b64encode(der)
    lines = [body[i : i + _PEM_LINE_CHARS] for i in range(0, len(body), _PEM_LINE_CHARS)]
    return b"\n".join([f"-----BEGIN {label}-----".encode(), *lines, f"-----END {label}-----".encode(), b""])


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
    # pycryptodome, imported here as AES below: only key export and import
    # (clients) use it; a node never loads it.
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
