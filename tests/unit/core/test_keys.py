import os
import ssl
import stat

import pytest

from flud.errors import FludError
from flud.keys import (
    BUNDLE_MAGIC,
    IDENTITY_FILENAME,
    NODE_ID_LENGTH,
    BadKeyFile,
    Identity,
    InsecureKeyFile,
    WrongPassphrase,
    export_secret_bundle,
    import_secret_bundle,
    self_signed_cert_der,
    self_signed_cert_pem,
)
from tests.cert_reader import public_der_of_cert


@pytest.fixture(scope="module")
def identity():
    return Identity.generate()


# --- identity -----------------------------------------------------------------


def test_node_id_is_sha256_of_public_der(identity):
    import hashlib

    assert len(identity.node_id) == NODE_ID_LENGTH
    assert identity.node_id == hashlib.sha256(identity.public_der).digest()
    assert identity.node_id_hex == identity.node_id.hex()
    assert Identity.node_id_of(identity.public_der) == identity.node_id


def test_public_der_is_p256_subject_public_key_info(identity):
    from Crypto.PublicKey import ECC

    key = ECC.import_key(identity.public_der)
    assert not key.has_private()
    assert key.curve == "NIST P-256"


def test_sign_and_verify(identity):
    signature = identity.sign(b"hello")
    assert signature[0] == 0x30  # DER SEQUENCE
    assert Identity.verify(identity.public_der, b"hello", signature)
    assert not Identity.verify(identity.public_der, b"hellO", signature)
    assert not Identity.verify(Identity.generate().public_der, b"hello", signature)


@pytest.mark.parametrize(
    "public_der, signature",
    [(b"", b"0"), (b"garbage", b"0"), (None, b"\x30\x00"), ("valid", b""), ("valid", b"\x30\x06\x02\x01\x01\x02\x01\x01")],
)
def test_verify_is_false_on_malformed_input(identity, public_der, signature):
    if public_der == "valid":
        public_der = identity.public_der
    if public_der is None:
        public_der = identity.public_der[:-5]
    assert Identity.verify(public_der, b"data", signature) is False


def test_verify_refuses_a_private_key_or_other_curve(identity):
    from Crypto.Hash import SHA256
    from Crypto.PublicKey import ECC
    from Crypto.Signature import DSS

    other = ECC.generate(curve="P-384")
    signature = DSS.new(other, "fips-186-3", encoding="der").sign(SHA256.new(b"x"))
    assert not Identity.verify(other.public_key().export_key(format="DER"), b"x", signature)
    private_der = ECC.import_key(identity.private_pem()).export_key(format="DER")
    assert not Identity.verify(private_der, b"x", identity.sign(b"x"))


def test_save_load_round_trip_with_private_mode(identity, tmp_path):
    path = tmp_path / "id.pem"
    identity.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = Identity.load(path)
    assert loaded.node_id == identity.node_id
    assert Identity.verify(identity.public_der, b"m", loaded.sign(b"m"))
    assert [p.name for p in tmp_path.iterdir()] == ["id.pem"]  # no temp left behind


def test_save_replaces_existing_file(tmp_path):
    path = tmp_path / "id.pem"
    first, second = Identity.generate(), Identity.generate()
    first.save(path)
    second.save(path)
    assert Identity.load(path).node_id == second.node_id


def test_load_or_create_creates_once_then_loads(tmp_path):
    home = tmp_path / "home"
    created = Identity.load_or_create(home)
    assert (home / IDENTITY_FILENAME).exists()
    assert stat.S_IMODE(home.stat().st_mode) & 0o077 == 0
    assert Identity.load_or_create(home).node_id == created.node_id


def test_load_refuses_key_readable_by_others(tmp_path):
    Identity.load_or_create(tmp_path)
    path = tmp_path / IDENTITY_FILENAME
    os.chmod(path, 0o644)
    with pytest.raises(InsecureKeyFile, match="chmod 600") as info:
        Identity.load_or_create(tmp_path)
    assert isinstance(info.value, FludError)
    assert info.value.code == "INSECURE_KEY_FILE"


def test_load_garbage_or_missing_is_bad_key_file(tmp_path):
    path = tmp_path / "id.pem"
    with pytest.raises(BadKeyFile, match="no key file"):
        Identity.load(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not a key")
    os.close(fd)
    with pytest.raises(BadKeyFile, match="not a readable"):
        Identity.load(path)


def test_public_only_key_is_not_an_identity(identity):
    from Crypto.PublicKey import ECC

    with pytest.raises(BadKeyFile):
        Identity.from_pem(ECC.import_key(identity.public_der).export_key(format="PEM").encode())


# --- certificate --------------------------------------------------------------


def test_certificate_carries_the_identity_key(identity):
    assert public_der_of_cert(self_signed_cert_der(identity)) == identity.public_der
    der = ssl.PEM_cert_to_DER_cert(self_signed_cert_pem(identity).decode())
    assert public_der_of_cert(der) == identity.public_der


def _tbs_and_signature(cert_der):
    # pycryptodome's DER parser: a second opinion on flud's own encoder
    from Crypto.Util.asn1 import DerBitString, DerSequence

    cert = DerSequence().decode(cert_der, strict=True)
    return cert[0], DerBitString().decode(cert[2], strict=True).value


def test_certificate_differs_only_in_its_signature(identity):
    # ECDSA with a random k: each call signs anew, over the same TBS
    first, second = self_signed_cert_der(identity), self_signed_cert_der(identity)
    assert _tbs_and_signature(first)[0] == _tbs_and_signature(second)[0]
    assert _tbs_and_signature(first)[0] != _tbs_and_signature(self_signed_cert_der(Identity.generate()))[0]


def test_certificate_signature_verifies_with_its_own_key(identity):
    tbs, signature = _tbs_and_signature(self_signed_cert_der(identity))
    assert Identity.verify(identity.public_der, tbs, signature)


@pytest.mark.parametrize("blob", [
    b"", b"\x30\x00", b"\x30\x03\x02\x01\x01", b"junk" * 10,
    b"\x30\x80\x00\x00",  # indefinite length (BER, not DER)
    b"\x30\x81\x03\x30\x01\x00",  # length not in its shortest form
    b"\x30\x05\x30\x03\x02\x01",  # inner element runs past its container
])
def test_public_der_of_cert_rejects_non_certificates(blob):
    with pytest.raises(BadKeyFile):
        public_der_of_cert(blob)


def test_public_der_of_cert_rejects_every_damaged_certificate(identity):
    der = self_signed_cert_der(identity)
    for cut in range(len(der)):
        with pytest.raises(BadKeyFile):
            public_der_of_cert(der[:cut])
    with pytest.raises(BadKeyFile):
        public_der_of_cert(der + b"\0")


def test_public_der_of_cert_without_the_optional_version(identity):
    from flud.keys import _sequence
    from tests.cert_reader import _der_elements

    def parts(der):
        (whole,) = _der_elements(der, 0, len(der))
        return [der[start:end] for _, start, _, end in _der_elements(der, whole[2], whole[3])]

    tbs, algorithm, signature = parts(self_signed_cert_der(identity))
    version, *rest = parts(tbs)
    assert version[0] == 0xA0
    v1_cert = _sequence(_sequence(*rest), algorithm, signature)  # SPKI moves up one place
    assert public_der_of_cert(v1_cert) == identity.public_der


def _tls_files(identity, directory):
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(self_signed_cert_pem(identity))
    identity.save(key_path)
    return cert_path, key_path


def test_stdlib_ssl_loads_certificate_and_key(identity, tmp_path):
    cert_path, key_path = _tls_files(identity, tmp_path)
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)


def _handshake_in_memory(server_context, client_context):
    """Drive a TLS handshake between two SSLObjects through MemoryBIOs."""
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_side=False)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    pending = {client, server}
    for _round in range(10):
        for end in list(pending):
            try:
                end.do_handshake()
                pending.discard(end)
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if not pending:
            break
    assert not pending, "handshake did not finish"
    client.write(b"ping")
    server_in.write(client_out.read())
    assert server.read(4) == b"ping"
    return client, server


def _client_context(maximum_version=ssl.TLSVersion.TLSv1_2):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = maximum_version
    return context


def test_tls12_handshake_presents_certificate_with_identity_key(identity, tmp_path):
    cert_path, key_path = _tls_files(identity, tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_path, key_path)
    client_context = _client_context()
    client_context.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")

    client, _server = _handshake_in_memory(server_context, client_context)

    assert client.version() == "TLSv1.2"
    assert client.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    peer_der = client.getpeercert(binary_form=True)
    assert peer_der == ssl.PEM_cert_to_DER_cert(cert_path.read_text())
    assert public_der_of_cert(peer_der) == identity.public_der
    assert Identity.node_id_of(public_der_of_cert(peer_der)) == identity.node_id


def test_tls13_handshake_and_pinned_verification(identity, tmp_path):
    # A peer that already knows our certificate can pin it as its only trust anchor.
    cert_path, key_path = _tls_files(identity, tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_path, key_path)
    client_context = _client_context(ssl.TLSVersion.MAXIMUM_SUPPORTED)
    client_context.verify_mode = ssl.CERT_REQUIRED
    client_context.load_verify_locations(cadata=ssl.PEM_cert_to_DER_cert(cert_path.read_text()))

    client, _server = _handshake_in_memory(server_context, client_context)

    assert client.version() == "TLSv1.3"
    assert public_der_of_cert(client.getpeercert(binary_form=True)) == identity.public_der


# --- secret bundle ------------------------------------------------------------

SECRET = bytes(range(32))


def test_bundle_round_trip(identity):
    blob = export_secret_bundle(identity, SECRET, "correct horse")
    assert blob.startswith(BUNDLE_MAGIC)
    assert SECRET not in blob and b"PRIVATE KEY" not in blob
    restored, secret = import_secret_bundle(blob, "correct horse")
    assert restored.node_id == identity.node_id
    assert secret == SECRET


def test_bundle_wrong_passphrase(identity):
    blob = export_secret_bundle(identity, SECRET, "correct horse")
    with pytest.raises(WrongPassphrase, match="wrong passphrase"):
        import_secret_bundle(blob, "correct h0rse")


@pytest.mark.parametrize("damage", ["truncate", "flip_body", "flip_salt", "magic", "params", "empty"])
def test_bundle_damage_is_bad_key_file_or_wrong_passphrase(identity, damage):
    blob = bytearray(export_secret_bundle(identity, SECRET, "pw"))
    if damage == "truncate":
        blob = blob[:-1]
    elif damage == "flip_body":
        blob[-40] ^= 1
    elif damage == "flip_salt":
        blob[12] ^= 1
    elif damage == "magic":
        blob[:8] = b"NOTAKEY1"
    elif damage == "params":
        blob[8] = 40  # 2**40 scrypt would take forever; refused up front
    elif damage == "empty":
        blob = b""
    # A damaged salt cannot be told apart from a wrong passphrase.
    expected = WrongPassphrase if damage == "flip_salt" else BadKeyFile
    with pytest.raises(expected):
        import_secret_bundle(bytes(blob), "pw")


def test_verify_refuses_the_same_key_in_another_encoding(identity):
    """A compressed point is the same key, but it would hash to another node ID."""
    from Crypto.PublicKey import ECC

    key = ECC.import_key(identity.public_der)
    compressed = key.export_key(format="DER", compress=True)
    assert compressed != identity.public_der
    assert ECC.import_key(compressed) == key
    signature = identity.sign(b"x")
    assert Identity.verify(identity.public_der, b"x", signature)
    assert not Identity.verify(compressed, b"x", signature)
    assert Identity.node_id_of(compressed) != identity.node_id
