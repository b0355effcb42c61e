"""The key on paper: lines a person can type back, each with a checksum that
names a mistyped line.

What is written is as small as the key allows: the private scalar d (the
public key is computed from it) and the user secret, sealed under the
passphrase exactly as an exported key file is (scrypt, then AES-256-GCM,
the header authenticated too):

    version (1) | payload length (1) | log2 N, r, p (3) | salt (16) | nonce (12)
    | ciphertext of d (32) + user secret (32) | GCM tag (16)

= 113 bytes, padded with zeros to whole 5-byte groups, in Crockford's base32
(0-9 and A-Z without I, L, O, U: nothing to confuse; read back in any case,
O as 0, I and L as 1), 16 characters a line in groups of 4, then a 2-character
checksum: the first 10 bits of SHA-256 over the line's number and its
characters. A typo in a line fails that line's checksum (1 in 1024 slips by,
and then the GCM tag refuses the whole); lines typed in the wrong order fail
theirs too, as the number is in it.
"""
import hashlib
import re
import secrets
import struct

from flud.errors import BadKeyFile, WrongPassphrase
from flud.keys import (SCRYPT_LOG2_N, SCRYPT_P, SCRYPT_R, _SCRYPT_LOG2_N_RANGE, _SCRYPT_P_RANGE,
                       _SCRYPT_R_RANGE, Identity, _stretch)

VERSION = 1
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
LINE_CHARS = 16            # 10 bytes a line
GROUP = 4
CHECK_CHARS = 2
TITLE = "flud paper key"
_HEADER = struct.Struct("!BBBBB16s12s")   # version, length, log2 N, r, p, salt, nonce
_TAG = 16
_D = 32
_READ = {c: i for i, c in enumerate(ALPHABET)}
_READ.update({"O": 0, "I": 1, "L": 1})
_LINE = re.compile(r"^\s*(\d{1,3})\s*[:.)]\s*([0-9A-Za-z][0-9A-Za-z \-]*?)\s*$")


class BadPaperLine(BadKeyFile):
    """One or more typed lines do not match their checksums."""

    code = "BAD_PAPER_LINE"

    def __init__(self, message, lines=()):
        super().__init__(message)
        self.lines = tuple(lines)


def seal(identity: Identity, user_secret: bytes, passphrase: str) -> bytes:
    from Crypto.Cipher import AES
    salt, nonce = secrets.token_bytes(16), secrets.token_bytes(12)
    plain = identity.private_d() + user_secret
    length = _HEADER.size + len(plain) + _TAG
    if length > 255:
        raise ValueError("a user secret this long does not fit on paper")
    header = _HEADER.pack(VERSION, length, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P, salt, nonce)
    key, _ = _stretch(passphrase, salt, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P)
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG)
    cipher.update(header)
    ciphertext, tag = cipher.encrypt_and_digest(plain)
    return header + ciphertext + tag


def unseal(payload: bytes, passphrase: str) -> tuple:
    """(identity, user secret); WrongPassphrase when the lines were right
    (their checksums matched) but the passphrase is not."""
    from Crypto.Cipher import AES
    if len(payload) < _HEADER.size + _D + _TAG:
        raise BadKeyFile("the paper key is too short: a line is missing")
    version, length, log2_n, r, p, salt, nonce = _HEADER.unpack_from(payload)
    if version != VERSION:
        raise BadKeyFile(f"a paper key of version {version}; this flud reads version {VERSION}")
    if log2_n not in _SCRYPT_LOG2_N_RANGE or r not in _SCRYPT_R_RANGE or p not in _SCRYPT_P_RANGE:
        raise BadKeyFile("the paper key's first line holds impossible parameters")
    body = payload[_HEADER.size:length]
    key, _ = _stretch(passphrase, salt, log2_n, r, p)
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG)
    cipher.update(payload[:_HEADER.size])
    try:
        plain = cipher.decrypt_and_verify(body[:-_TAG], body[-_TAG:])
    except ValueError:
        raise WrongPassphrase("every line matches its checksum, but the passphrase does not "
                              "open the key: check the passphrase (keyboard layout, caps "
                              "lock)") from None
    return Identity.from_private_scalar(plain[:_D]), plain[_D:]


def _encode(data: bytes) -> str:
    data += b"\0" * (-len(data) % 5)
    bits = int.from_bytes(data, "big")
    count = len(data) * 8 // 5
    return "".join(ALPHABET[(bits >> (5 * (count - 1 - i))) & 31] for i in range(count))


def _decode(text: str) -> bytes:
    bits = 0
    for char in text:
        bits = (bits << 5) | _READ[char]
    return bits.to_bytes(len(text) * 5 // 8, "big")


def checksum(number: int, chars: str) -> str:
    digest = hashlib.sha256(f"{number}:{chars}".encode()).digest()
    value = int.from_bytes(digest[:2], "big") >> 6      # 10 bits
    return ALPHABET[value >> 5] + ALPHABET[value & 31]


def to_lines(payload: bytes) -> list:
    """['01: 4K7Q MZ2A 9XHT B6WD  R3', ...]"""
    text = _encode(payload)
    lines = []
    for number, start in enumerate(range(0, len(text), LINE_CHARS), 1):
        chars = text[start:start + LINE_CHARS]
        groups = " ".join(chars[i:i + GROUP] for i in range(0, len(chars), GROUP))
        lines.append(f"{number:02d}: {groups}  {checksum(number, chars)}")
    return lines


def page(payload: bytes, client_id: str, date: str) -> str:
    """The text to print: a title, how to type it back, the lines."""
    return "\n".join([
        f"{TITLE} v{VERSION}   client {client_id}   {date}",
        "Keep this page safe; with the passphrase it is your whole backup key.",
        "Type it back with `flud key import --paper KEYFILE` (asked line by line), or",
        "type the lines into a file for `flud init --import-key`. Case, spaces and",
        "dashes do not matter; O reads as 0, I and L as 1. The last 2 characters of",
        "each line are its checksum: a mistyped line is named.",
        "",
        *to_lines(payload), ""])


def read_line(text: str, expected: int = None):
    """(number, chars) of one typed line; BadPaperLine naming it when its
    checksum does not match. None for a line that is not a key line."""
    match = _LINE.match(text)
    if not match:
        return None
    number = int(match.group(1))
    if expected is not None and number != expected:
        raise BadPaperLine(f"line {expected:02d} expected, line {number:02d} given", [expected])
    raw = re.sub(r"[\s\-]", "", match.group(2)).upper()
    if len(raw) <= CHECK_CHARS:
        raise BadPaperLine(f"line {number:02d}: too short", [number])
    chars, check = raw[:-CHECK_CHARS], raw[-CHECK_CHARS:]
    if any(c not in _READ for c in raw):
        wrong = next(c for c in raw if c not in _READ)
        raise BadPaperLine(f"line {number:02d}: {wrong!r} is not a paper-key character "
                           f"(U is never used)", [number])
    chars = "".join(ALPHABET[_READ[c]] for c in chars)
    check = "".join(ALPHABET[_READ[c]] for c in check)
    if len(chars) > LINE_CHARS or checksum(number, chars) != check:
        raise BadPaperLine(f"line {number:02d} does not match its checksum: check what you "
                           f"typed on that line", [number])
    return number, chars


def read_line_number(text: str):
    """The number of a line shaped like a key line ("07: ..."), or None."""
    match = _LINE.match(text)
    return int(match.group(1)) if match else None


def lines_needed(first_chars: str) -> int:
    """How many lines the key has, read off the first line's length byte."""
    length = _decode(first_chars[:8])[1]
    chars = (length + (-length % 5)) * 8 // 5
    return -(-chars // LINE_CHARS)


def from_lines(text: str) -> bytes:
    """The payload from every key line in text (other lines are skipped);
    BadPaperLine names every mistyped or missing line."""
    found, bad = {}, []
    for raw in text.splitlines():
        try:
            parsed = read_line(raw)
        except BadPaperLine as err:
            bad.extend(err.lines)
            continue
        if parsed is not None:
            found[parsed[0]] = parsed[1]
    if bad:
        names = ", ".join(f"{n:02d}" for n in sorted(set(bad)))
        raise BadPaperLine(f"line(s) {names} do not match their checksums: check what you "
                           f"typed on them", sorted(set(bad)))
    if 1 not in found:
        raise BadPaperLine("no line 01 of a paper key found", [1])
    needed = lines_needed(found[1])
    missing = [n for n in range(1, needed + 1) if n not in found]
    if missing:
        names = ", ".join(f"{n:02d}" for n in missing)
        raise BadPaperLine(f"line(s) {names} missing: the key has {needed} lines", missing)
    return _decode("".join(found[n] for n in range(1, needed + 1)))
