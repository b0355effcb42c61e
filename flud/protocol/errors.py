"""Wire error codes: the one table (docs/protocol.md section 5)."""
import enum


class ErrorCode(enum.IntEnum):
    MALFORMED = 1
    UNKNOWN_OP = 2
    TOO_LARGE = 3
    NOT_FOUND = 4
    HASH_MISMATCH = 5
    NO_SPACE = 6
    BAD_KEY = 7
    BAD_RANGE = 8
    BAD_ARCHIVE = 9
    BUSY = 10
    CANCELLED = 11
    PROTOCOL = 12
    VERSION = 13
    INTERNAL = 14
    UNAVAILABLE = 15
    UPLOAD_LIMIT = 16
    STALLED = 17


MAX_ERROR_MESSAGE = 1024


class RemoteError(Exception):
    """An error a peer answered with (or that we answer with): code + text."""

    def __init__(self, code: int, message: str):
        try:
            code = ErrorCode(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        name = code.name if isinstance(code, ErrorCode) else f"code {code}"
        super().__init__(f"{name}: {message}")


class FrameError(RemoteError):
    """The byte stream itself is bad: the connection must be closed."""


class ConnectionLost(Exception):
    """The connection went away before the request was answered."""


class AuthenticationFailed(Exception):
    """The peer did not prove possession of its key, or is not who we expected."""


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
    if isinstance(exc, RemoteError) and isinstance(exc.code, ErrorCode):
        return exc.code
    return STORAGE_CODES.get(getattr(exc, "code", None), ErrorCode.INTERNAL)
