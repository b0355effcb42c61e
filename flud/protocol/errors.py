"""The protocol's errors, and the one table of wire error codes.

Every error here is a flud.errors.FludError: its `code` is a stable string.

Errors that cross the wire are RemoteErrors. Their code is an ErrorCode: a
str enum whose value is its name ("NO_SPACE"), so it is a FludError code
like any other, and `ErrorCode.NO_SPACE.wire` is the integer an ERROR frame
carries. The ErrorCode members are the one table, wire integer <-> name
(docs/protocol.md section 5); from_wire() reads an integer back. An integer
no member has (a newer peer's) still makes a RemoteError, with the code
"CODE_<n>" and `wire_code` n.

The store (storage/) imports nothing of flud: each StorageError carries its
own short string code ("no_space"), and STORAGE_CODES below maps those to
wire codes, so a node answers a storage failure with the right ERROR without
the store knowing the wire (code_for_exception). Anything else a handler
raises is answered INTERNAL, its details kept in the node's log.

Errors that stay on this side but reach the user: ConnectFailed (a dial that
never connected), ConnectionLost (a connection that went away with requests
open), AuthenticationFailed (the peer is not who it claims or is expected to
be), TLSFailed (re-exported by flud.protocol.tls) and PeerStalled
(re-exported by flud.protocol.stall).
"""
import enum

from flud.errors import FludError


class ErrorCode(str, enum.Enum):
    """A wire error's stable name; `.wire` is its integer on the wire."""

    def __new__(cls, name: str, wire: int):
        member = str.__new__(cls, name)
        member._value_ = name
        member.wire = wire
        return member

    def __str__(self) -> str:
        return self.value

    MALFORMED = "MALFORMED", 1
    UNKNOWN_OP = "UNKNOWN_OP", 2
    TOO_LARGE = "TOO_LARGE", 3
    NOT_FOUND = "NOT_FOUND", 4
    HASH_MISMATCH = "HASH_MISMATCH", 5
    NO_SPACE = "NO_SPACE", 6
    BAD_KEY = "BAD_KEY", 7
    BAD_RANGE = "BAD_RANGE", 8
    BAD_ARCHIVE = "BAD_ARCHIVE", 9
    BUSY = "BUSY", 10
    CANCELLED = "CANCELLED", 11
    PROTOCOL = "PROTOCOL", 12
    VERSION = "VERSION", 13
    INTERNAL = "INTERNAL", 14
    UNAVAILABLE = "UNAVAILABLE", 15
    UPLOAD_LIMIT = "UPLOAD_LIMIT", 16
    STALLED = "STALLED", 17
    # give to get (docs/quotas.md): numbered apart from the others' additions
    QUOTA = "QUOTA", 30
    BAD_LINK = "BAD_LINK", 31
    RATE_LIMITED = "RATE_LIMITED", 40
    # reachability (docs/reachability.md): a dial-back aimed at an address
    # other than the one the asker was seen at
    DIAL_THIRD_PARTY = "DIAL_THIRD_PARTY", 50
    # relay: this node relays for nobody (--no-relay), or its reservations are full
    RELAY_REFUSED = "RELAY_REFUSED", 51
    RELAY_FULL = "RELAY_FULL", 52
    # hole punching: this node will not punch now (not behind a NAT, not on
    # a relayed connection, no CONNECT agreed before a SYNC), or an announced
    # address the peer could not be seen at (a third party, loopback...)
    PUNCH_REFUSED = "PUNCH_REFUSED", 53
    PUNCH_ADDRESS = "PUNCH_ADDRESS", 54


_BY_WIRE = {code.wire: code for code in ErrorCode}


def from_wire(wire: int):
    """The ErrorCode an ERROR frame's integer stands for, or None if unknown."""
    return _BY_WIRE.get(wire)


def wire_of(code) -> int:
    """The integer an ERROR frame carries for `code` (an ErrorCode, or an
    integer already: one from a peer, passed on)."""
    return code.wire if isinstance(code, ErrorCode) else int(code)


MAX_ERROR_MESSAGE = 1024


class RemoteError(FludError):
    """An error a peer answered with (or that we answer with): code + text.

    `code` is the ErrorCode (or "CODE_<n>" for an integer no member has);
    `wire_code` the integer on the wire."""

    code = "REMOTE_ERROR"

    def __init__(self, code, message: str):
        known = code if isinstance(code, ErrorCode) else from_wire(code)
        if known is not None:
            self.code, self.wire_code = known, known.wire
            name = known.name
        else:
            self.code, self.wire_code = f"CODE_{code}", code
            name = f"code {code}"
        self.message = message
        super().__init__(f"{name}: {message}")


class FrameError(RemoteError):
    """The byte stream itself is bad: the connection must be closed."""


class ConnectFailed(FludError):
    """A dial that never connected: refused, unreachable, or timed out
    before TLS. Callers that fail a node for it fail it as for a
    ConnectionLost."""

    code = "CONNECT_FAILED"


class ConnectionLost(FludError):
    """The connection went away before the request was answered."""

    code = "CONNECTION_LOST"


class AuthenticationFailed(FludError):
    """The peer did not prove possession of its key, or is not who we expected."""

    code = "AUTH_FAILED"


class TLSFailed(FludError):
    """The TLS handshake or a record failed; the connection must close."""

    code = "TLS_FAILED"


class PeerStalled(FludError, ConnectionError):
    """A peer owed us progress and made none within the deadline. Still a
    ConnectionError (so an OSError), as callers that tell a node's failure
    from a file's have always seen it."""

    code = "PEER_STALLED"


# Storage error class name -> wire code. Keyed by the `code` string each
# storage error carries, so this module needs no import of storage.
STORAGE_CODES = {
    "not_found": ErrorCode.NOT_FOUND,
    "hash_mismatch": ErrorCode.HASH_MISMATCH,
    "no_space": ErrorCode.NO_SPACE,
    "bad_key": ErrorCode.BAD_KEY,
    "bad_range": ErrorCode.BAD_RANGE,
    "too_large": ErrorCode.TOO_LARGE,
    "bad_archive": ErrorCode.BAD_ARCHIVE,
    "store_closed": ErrorCode.UNAVAILABLE,  # the node is shutting down
    "upload_limit": ErrorCode.UPLOAD_LIMIT,
}


def code_for_exception(exc: BaseException) -> ErrorCode:
    """The wire code a node answers `exc` with."""
    if isinstance(exc, RemoteError) and isinstance(exc.code, ErrorCode):
        return exc.code
    return STORAGE_CODES.get(getattr(exc, "code", None), ErrorCode.INTERNAL)
