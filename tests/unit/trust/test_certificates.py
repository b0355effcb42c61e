"""Friends' certificates and revocation lists (flud/trust/certificates.py) and
the home's friends.json (flud/client/friends_store.py)."""
import json

import pytest

from flud.client.friends_store import FriendsStore
from flud.keys import Identity
from flud.trust.certificates import (
    CERT_BAD_SIGNATURE, CERT_EXPIRED, CERT_MALFORMED, CERT_REVOKED, CERT_WRONG_ISSUER,
    CERT_WRONG_NODE, CertificateRefused, check_certificate, decode_certificate,
    issue_certificate, sign_revocations)

T0 = 1_800_000_000.0
NODE = bytes(range(32))


@pytest.fixture(scope="module")
def user():
    return Identity.generate()


def _refused(code, fn, *args, **kwargs):
    with pytest.raises(CertificateRefused) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == code
    return caught.value


def test_a_certificate_round_trips_and_checks(user):
    cert = issue_certificate(user, NODE, T0, 30 * 86400)
    back = decode_certificate(cert.encode())
    assert back == cert
    assert check_certificate(back, user.public_der, T0 + 1, node_id=NODE) == cert


def test_forged_certificates_are_refused_with_stable_codes(user):
    cert = issue_certificate(user, NODE, T0, 30 * 86400)
    other = Identity.generate()
    _refused(CERT_WRONG_ISSUER, check_certificate, issue_certificate(other, NODE, T0),
             user.public_der, T0)
    raw = bytearray(cert.encode())
    raw[70] ^= 1                       # the node id changed under the signature
    _refused(CERT_BAD_SIGNATURE, check_certificate, decode_certificate(bytes(raw)),
             user.public_der, T0)
    _refused(CERT_WRONG_NODE, check_certificate, cert, user.public_der, T0, node_id=b"x" * 32)
    _refused(CERT_EXPIRED, check_certificate, cert, user.public_der, T0 + 31 * 86400)
    _refused(CERT_MALFORMED, decode_certificate, cert.encode()[:50])
    _refused(CERT_MALFORMED, decode_certificate, cert.encode() + b"x")


def test_a_revoked_node_is_refused_until_certified_again(user):
    cert = issue_certificate(user, NODE, T0)
    revoked = sign_revocations(user, [NODE], 1, T0 + 10)
    _refused(CERT_REVOKED, check_certificate, cert, user.public_der, T0 + 20,
             revocations=revoked)
    later = issue_certificate(user, NODE, T0 + 30)
    assert check_certificate(later, user.public_der, T0 + 40, revocations=revoked)


def test_the_store_adds_lists_revokes_and_refuses_a_forged_file(tmp_path, user):
    store = FriendsStore(str(tmp_path), user)
    store.add(NODE, T0, 86400 * 365, "alice")
    store.add(b"\x01" * 32, T0, 86400 * 365)
    store.set_friends_only(True)
    again = FriendsStore(str(tmp_path), user)
    assert again.friends_only and again.trusted(T0 + 5) == {NODE, b"\x01" * 32}
    again.revoke(b"\x01" * 32, T0 + 10)
    assert FriendsStore(str(tmp_path), user).trusted(T0 + 20) == {NODE}
    # someone writes a certificate made by another key into friends.json
    forged = issue_certificate(Identity.generate(), b"\x02" * 32, T0)
    path = tmp_path / "friends.json"
    data = json.loads(path.read_text())
    data["certificates"][(b"\x02" * 32).hex()] = {"certificate": forged.encode().hex(),
                                                 "name": "mallory"}
    path.write_text(json.dumps(data))
    store = FriendsStore(str(tmp_path), user)
    assert store.trusted(T0 + 20) == {NODE}
    codes = {node: code for node, _, _, code in store.entries(T0 + 20)}
    assert codes[(b"\x02" * 32).hex()] == CERT_WRONG_ISSUER
    _refused(CERT_WRONG_ISSUER, store.add_certificate, forged.encode(), T0 + 20)
