"""flud.keys on OpenSSL (flud.libcrypto) against pycryptodome, which wrote
every existing identity: the same files, keys and signatures both ways, and
malformed input that never crashes a node."""
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from Crypto.Hash import SHA256
from Crypto.PublicKey import ECC
from Crypto.Signature import DSS

from flud import libcrypto
from flud.keys import BadKeyFile, Identity, self_signed_cert_der
from tests.cert_reader import public_der_of_cert

REPO = Path(__file__).resolve().parents[3]


def pycryptodome_pem(key) -> bytes:
    """identity.pem as flud wrote it before flud.libcrypto (byte for byte)."""
    return key.export_key(format="PEM", use_pkcs8=True).encode("ascii")


def dss(key):
    return DSS.new(key, "fips-186-3", encoding="der")


@pytest.mark.parametrize("seed", range(20))
def test_keys_written_by_pycryptodome_load_and_are_written_back_the_same(seed, tmp_path):
    key = ECC.generate(curve="P-256")
    path = tmp_path / "identity.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, pycryptodome_pem(key))
    os.close(fd)
    identity = Identity.load(path)
    assert identity.public_der == key.public_key().export_key(format="DER")
    assert identity.node_id == SHA256.new(identity.public_der).digest()
    assert identity.private_pem() == pycryptodome_pem(key)
    assert ECC.import_key(identity.private_pem()) == key


@pytest.mark.parametrize("seed", range(20))
def test_signatures_verify_both_ways(seed):
    identity = Identity.generate()
    key = ECC.import_key(identity.private_pem())  # the same key in pycryptodome
    public = ECC.import_key(identity.public_der)
    data = os.urandom(seed * 7)
    dss(public).verify(SHA256.new(data), identity.sign(data))  # raises if invalid
    assert Identity.verify(identity.public_der, data, dss(key).sign(SHA256.new(data)))
    assert not Identity.verify(identity.public_der, data + b"x", dss(key).sign(SHA256.new(data)))


def test_other_private_key_forms_of_p256_load_as_the_same_key():
    key = ECC.generate(curve="P-256")
    spki = key.public_key().export_key(format="DER")
    for pem in (pycryptodome_pem(key) + b"\n", pycryptodome_pem(key).replace(b"\n", b"\r\n"),
                key.export_key(format="PEM", use_pkcs8=False).encode("ascii"),  # SEC1
                key.export_key(format="PEM", use_pkcs8=True, compress=True).encode("ascii")):
        identity = Identity.from_pem(pem)
        assert identity.public_der == spki
        assert identity.private_pem() == pycryptodome_pem(key)


def _pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = b"\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label.encode(), lines, label.encode())


def test_garbage_and_other_keys_are_bad_key_files():
    key = ECC.generate(curve="P-256")
    der = key.export_key(format="DER", use_pkcs8=True)
    other_xy = ECC.generate(curve="P-256").public_key().export_key(format="DER")[-64:]
    for pem in (
        b"", b"not a key", os.urandom(200), b"-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----",
        _pem("PRIVATE KEY", os.urandom(138)), _pem("PRIVATE KEY", der[:-1]), _pem("PRIVATE KEY", der + b"\0"),
        _pem("PRIVATE KEY", der[:-64] + other_xy),  # d of one key, point of another
        pycryptodome_pem(ECC.generate(curve="P-384")),
        ECC.generate(curve="Ed25519").export_key(format="PEM").encode("ascii"),
        key.public_key().export_key(format="PEM").encode("ascii"),
        key.export_key(format="PEM", passphrase="pw", use_pkcs8=True,
                       protection="PBKDF2WithHMAC-SHA256AndAES128-CBC").encode("ascii"),
        pycryptodome_pem(key).replace(b"M", b"*", 1),  # not base64
    ):
        with pytest.raises(BadKeyFile):
            Identity.from_pem(pem)


def test_verify_is_false_on_every_malformed_key_or_signature():
    identity = Identity.generate()
    good = identity.sign(b"data")
    p384 = ECC.generate(curve="P-384")
    p384_signature = dss(p384).sign(SHA256.new(b"data"))
    cases = [
        (p384.public_key().export_key(format="DER"), p384_signature),  # valid, but not P-256
        (os.urandom(91), good), (b"", good), (b"\x30", good),
        (identity.public_der + b"\0", good), (identity.public_der[:-1], good),
        (identity.public_der[:-1] + bytes([identity.public_der[-1] ^ 1]), good),  # off the curve
        (ECC.import_key(identity.private_pem()).export_key(format="DER"), good),
        (identity.public_der, b""), (identity.public_der, os.urandom(72)),
        (identity.public_der, good[:-1]), (identity.public_der, good + b"\0"),
        (identity.public_der, p384_signature),
        (None, good), ("text", good), (identity.public_der, None),
    ]
    for _ in range(50):
        cases.append((os.urandom(len(identity.public_der)), os.urandom(70)))
        flipped = bytearray(good)
        flipped[os.urandom(1)[0] % len(good)] ^= 1 << (os.urandom(1)[0] % 8)
        cases.append((identity.public_der, bytes(flipped)))
    for public_der, signature in cases:
        assert Identity.verify(public_der, b"data", signature) is False
    assert Identity.verify(identity.public_der, b"data", good) is True
    assert Identity.verify(memoryview(identity.public_der), memoryview(b"data"), bytearray(good)) is True


def _peek_error() -> int:
    lib = libcrypto._lib()
    peek = lib.ERR_peek_error
    peek.restype, peek.argtypes = libcrypto.c_ulong, []
    return peek()


def test_failures_leave_no_openssl_errors_behind():
    identity = Identity.generate()
    assert not Identity.verify(b"\x30\x03\x02\x01\x01", b"x", b"")
    assert not Identity.verify(identity.public_der, b"x", b"\x30\x00")
    with pytest.raises(BadKeyFile):
        Identity.from_pem(_pem("PRIVATE KEY", b"\x30\x03\x02\x01\x01"))
    assert _peek_error() == 0


def test_libcrypto_errors_are_typed():
    assert issubclass(libcrypto.UnsupportedKey, libcrypto.LibcryptoError)
    assert issubclass(libcrypto.UnsupportedKey, ValueError)
    assert issubclass(libcrypto.LibcryptoUnavailable, libcrypto.LibcryptoError)
    with pytest.raises(libcrypto.UnsupportedKey):
        libcrypto.P256Key.from_der(b"\x30\x00")
    with pytest.raises(libcrypto.UnsupportedKey):
        libcrypto.P256Key.from_der("text")


# A certificate made by the pycryptodome code (RFC 6979 signature) for this key.
_OLD_KEY = b"""-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgya+p2EW6dRZrXCFX
Z7HWk05Qw9s26JsSe4piKxIPZyGhRANCAARg/tS6JVqdMclh63TGNW1owEm4kjth
+mzmaWIuYPKftnkD/hAIuLyZpBrp6VYovGTy8bIMLX6fUXejwpTURiKZ
-----END PRIVATE KEY-----"""
_OLD_CERT = bytes.fromhex(
    "3082016030820106a00302010202105a7a78cca4a0f420d9bc62bb669c3c27300a06082a8648ce3d04030230"
    "20311e301c06035504030c15666c756420356137613738636361346130663432303020170d30303031303130"
    "30303030305a180f32303939313233313233353935395a3020311e301c06035504030c15666c756420356137"
    "613738636361346130663432303059301306072a8648ce3d020106082a8648ce3d0301070342000460fed4ba"
    "255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb67903fe1008b8bc99a41ae9e95628bc64"
    "f2f1b20c2d7e9f5177a3c294d4462299a320301e300c0603551d130101ff04023000300e0603551d0f0101ff"
    "040403020780300a06082a8648ce3d040302034800304502206f98b6ce9f93e9be34fbf1504e2f3aba932b1d"
    "72d49934796d7b6ed7608a90c70221008ed983b0e23f1d6b17f55ac0d241fac41e145bacdb4195ed60dcff7f"
    "5d730ca6")
_OLD_TBS = _OLD_CERT[4:4 + 4 + 0x106]


def test_certificate_is_the_one_pycryptodome_made_but_for_the_signature():
    identity = Identity.from_pem(_OLD_KEY)
    assert identity.private_pem() == _OLD_KEY
    cert = self_signed_cert_der(identity)
    assert cert[4:4 + len(_OLD_TBS)] == _OLD_TBS
    assert public_der_of_cert(_OLD_CERT) == public_der_of_cert(cert) == identity.public_der
    signature = cert[4 + len(_OLD_TBS) + 12 + 3:]  # after the algorithm and the BIT STRING head
    dss(ECC.import_key(identity.public_der)).verify(SHA256.new(_OLD_TBS), signature)


def _run_fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_a_node_never_imports_pycryptodome_nor_hashlib():
    code = (
        "import sys, tempfile\n"
        "import flud.node.process as process\n"
        "process.preload()\n"
        "from twisted.internet import reactor\n"
        "from flud.node.config import NodeConfig\n"
        "from flud.node.service import NodeService\n"
        "home = tempfile.mkdtemp()\n"
        "for start in range(2):  # a fresh home (key and certificate made), then a known one\n"
        "    node = NodeService(reactor, NodeConfig(home=home, port=0))\n"
        "    node.startService()\n"
        "    node.stopService()\n"
        "peer = __import__('flud.keys').keys.Identity.generate()\n"
        "assert peer.verify(peer.public_der, b'hi', peer.sign(b'hi'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "             ('Crypto', 'hashlib', '_hashlib', 'hmac', 'secrets', 'subprocess')))\n"
    )
    assert _run_fresh(code) == "[]"
