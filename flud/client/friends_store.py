"""A home's friends: the certificates its user key signed, the signed
revocation list, and whether the home keeps to friends (friends.json).

    {"version": 1, "friends_only": false,
     "certificates": {node id hex: {"certificate": hex, "name": "..."}},
     "revocations": hex or null}

Written crash-safe (a temp file, fsync, rename). Every certificate is
checked against the home's own key when read: a file edited by hand or by
someone else cannot add a friend (trust/certificates.py says why not, with
a stable code).
"""
import json
import os

from flud.errors import FludError
from flud.trust.certificates import (
    CertificateRefused, check_certificate, check_revocations, decode_certificate,
    decode_revocations, issue_certificate, sign_revocations)

FILE_NAME = "friends.json"
VERSION = 1
MAX_NAME = 100


class FriendsFileError(FludError):
    code = "FRIENDS_FILE"


class FriendsStore:
    def __init__(self, home_path: str, identity):
        self.path = os.path.join(home_path, FILE_NAME)
        self.identity = identity
        self.data = {"version": VERSION, "friends_only": False, "certificates": {},
                     "revocations": None}
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            raise FriendsFileError(f"{self.path} cannot be read: {err}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise FriendsFileError(f"{self.path} has version {data.get('version')!r}; "
                                   f"this flud reads {VERSION}")
        self.data.update(data)

    @property
    def friends_only(self) -> bool:
        return bool(self.data["friends_only"])

    def set_friends_only(self, on: bool) -> None:
        self.data["friends_only"] = bool(on)
        self._save()

    def revocations(self):
        raw = self.data.get("revocations")
        if not raw:
            return None
        return check_revocations(decode_revocations(bytes.fromhex(raw)),
                                 self.identity.public_der)

    def add(self, node_id: bytes, now: float, lifetime: float, name: str = ""):
        cert = issue_certificate(self.identity, node_id, now, lifetime)
        return self.add_certificate(cert.encode(), now, name)

    def add_certificate(self, raw: bytes, now: float, name: str = ""):
        """Keep a certificate given as bytes (one this key signed, perhaps on
        another home made from the same key): CertificateRefused if it is not."""
        revocations = self.revocations()
        cert = check_certificate(decode_certificate(raw), self.identity.public_der, now)
        if revocations is not None and cert.node_id in revocations.revoked:
            # a newer certificate lifts the revocation: the list drops the node
            kept = [n for n in revocations.revoked if n != cert.node_id]
            self._set_revocations(kept, revocations.sequence + 1, now)
        self.data["certificates"][cert.node_id.hex()] = {
            "certificate": cert.encode().hex(), "name": name[:MAX_NAME]}
        self._save()
        return cert

    def revoke(self, node_id: bytes, now: float) -> None:
        revocations = self.revocations()
        revoked = set(revocations.revoked) if revocations else set()
        revoked.add(node_id)
        self._set_revocations(revoked, (revocations.sequence + 1) if revocations else 1, now)
        self.data["certificates"].pop(node_id.hex(), None)
        self._save()

    def _set_revocations(self, revoked, sequence: int, now: float) -> None:
        self.data["revocations"] = sign_revocations(self.identity, revoked, sequence,
                                                    now).encode().hex()

    def entries(self, now: float) -> list:
        """[(node id hex, name, certificate or None, refusal code or None)]."""
        revocations = self.revocations()
        out = []
        for node_hex, entry in sorted(self.data["certificates"].items()):
            try:
                cert = check_certificate(decode_certificate(bytes.fromhex(entry["certificate"])),
                                         self.identity.public_der, now,
                                         node_id=bytes.fromhex(node_hex),
                                         revocations=revocations)
                out.append((node_hex, entry.get("name", ""), cert, None))
            except (CertificateRefused, ValueError) as err:
                out.append((node_hex, entry.get("name", ""), None,
                            getattr(err, "code", "CERTIFICATE_MALFORMED")))
        return out

    def trusted(self, now: float) -> set:
        """Node ids with a certificate that checks now."""
        return {bytes.fromhex(node_hex) for node_hex, _, cert, _ in self.entries(now) if cert}

    def _save(self) -> None:
        temp = self.path + ".tmp"
        with open(temp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
