"""flud.keys imports P-256 keys without building all of pycryptodome's
curves, and gets exactly what ECC.import_key gets, for any input."""
import base64
import subprocess
import sys
from pathlib import Path

import pytest
from Crypto.PublicKey import ECC

from flud.keys import Identity, _construct_exported_p256, _import_key

REPO = Path(__file__).resolve().parents[3]


def same_outcome(encoded):
    try:
        expected = ECC.import_key(encoded)
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        with pytest.raises(type(exc)):
            _import_key(encoded)
        return
    assert _import_key(encoded) == expected


@pytest.mark.parametrize("seed", range(20))
def test_the_forms_flud_writes_take_the_short_way_to_the_same_key(seed):
    key = ECC.generate(curve="P-256")
    pem = key.export_key(format="PEM", use_pkcs8=True).encode("ascii")
    spki = key.public_key().export_key(format="DER")
    assert _construct_exported_p256(pem) == key == ECC.import_key(pem)
    assert _construct_exported_p256(spki) == key.public_key() == ECC.import_key(spki)
    assert Identity.from_pem(pem).public_der == spki


def test_other_forms_and_bad_keys_go_to_ecc_import_key():
    key = ECC.generate(curve="P-256")
    pem = key.export_key(format="PEM", use_pkcs8=True).encode("ascii")
    spki = key.public_key().export_key(format="DER")
    other = ECC.generate(curve="P-256")
    variants = [
        pem + b"\n", pem.replace(b"\n", b"\r\n"),
        key.export_key(format="PEM", use_pkcs8=False).encode("ascii"),  # SEC1 "EC PRIVATE KEY"
        key.export_key(format="DER", use_pkcs8=True),
        key.public_key().export_key(format="PEM").encode("ascii"),
        key.public_key().export_key(format="DER", compress=True),
        ECC.generate(curve="P-384").export_key(format="PEM", use_pkcs8=True).encode("ascii"),
        ECC.generate(curve="P-384").public_key().export_key(format="DER"),
        spki[:-1] + bytes([spki[-1] ^ 1]),  # not on the curve
        spki[:-1], spki + b"\0", b"", b"\x30", b"-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----",
    ]
    der = key.export_key(format="DER", use_pkcs8=True)
    other_xy = other.public_key().export_key(format="DER")[-64:]
    mismatched = der[:-64] + other_xy  # d of one key, point of another
    body = base64.encodebytes(mismatched).replace(b"\n", b"")
    lines = b"\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    variants.append(b"-----BEGIN PRIVATE KEY-----\n" + lines + b"\n-----END PRIVATE KEY-----")
    for encoded in variants:
        try:
            shortcut = _construct_exported_p256(encoded)
        except ValueError:  # e.g. a point off the curve: _import_key asks ECC.import_key
            shortcut = None
        assert shortcut is None
        same_outcome(encoded)


def test_a_node_and_its_peers_keys_build_p256_alone():
    code = (
        "from flud.keys import Identity\n"
        "from Crypto.PublicKey._point import _curves\n"
        "me, peer = Identity.generate(), Identity.generate()\n"
        "again = Identity.from_pem(me.private_pem())\n"
        "assert again.node_id == me.node_id\n"
        "assert Identity.verify(peer.public_der, b'hello', peer.sign(b'hello'))\n"
        "assert not Identity.verify(peer.public_der, b'hellO', peer.sign(b'hello'))\n"
        "print(len({id(c) for c in _curves.curves.values()}))\n"
    )
    assert _run_fresh(code) == "1"


def _run_fresh(code: str) -> str:
    """What code prints, run in a fresh interpreter (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("seed", range(50))
def test_private_pem_is_what_pycryptodome_exports(seed):
    key = ECC.generate(curve="P-256")
    identity = Identity(key)
    assert identity.private_pem() == key.export_key(format="PEM", use_pkcs8=True).encode("ascii")


def test_a_node_never_loads_pycryptodome_pem_pkcs8_aes_or_kdfs():
    code = (
        "import sys\n"
        "from flud.lean import defer_unused_imports\n"
        "defer_unused_imports()\n"
        "from flud.keys import Identity, self_signed_cert_pem\n"
        "import tempfile\n"
        "home = tempfile.mkdtemp()\n"
        "me = Identity.load_or_create(home)\n"
        "self_signed_cert_pem(me)\n"
        "assert Identity.load_or_create(home).node_id == me.node_id\n"
        "peer = Identity.generate()\n"
        "assert Identity.verify(peer.public_der, b'hi', peer.sign(b'hi'))\n"
        "names = ('Crypto.IO.PEM', 'Crypto.IO.PKCS8', 'Crypto.IO._PBES', 'Crypto.Cipher.AES',\n"
        "         'Crypto.Cipher.DES3', 'Crypto.Protocol.KDF', 'Crypto.Hash.MD5')\n"
        "print([n for n in names if n in sys.modules\n"
        "       and type(sys.modules[n]).__name__ != '_LazyModule'])\n"
    )
    assert _run_fresh(code) == "[]"
