"""flud's typed errors: one root, one stable code per error.

`code` is machine-readable and never changes once released; the message is
written for the person who will read it. Modules re-export the errors they
raise, so `from flud.keys import WrongPassphrase` works as well.
"""


class FludError(Exception):
    """Root of every error flud raises on purpose."""

    code: str = "FLUD_ERROR"


# --- keys.py: identity and key files ----------------------------------------


class KeyFileError(FludError):
    code = "KEY_FILE"


class BadKeyFile(KeyFileError):
    """A key file or key bundle is unreadable, truncated or damaged."""

    code = "BAD_KEY_FILE"


class WrongPassphrase(KeyFileError):
    code = "WRONG_PASSPHRASE"


class InsecureKeyFile(KeyFileError):
    """A private key file is readable by group or others."""

    code = "INSECURE_KEY_FILE"


# --- crypto.py: content encryption ------------------------------------------


class IntegrityError(FludError):
    """Authenticated data failed its check: tampered, truncated or wrong key."""

    code = "INTEGRITY"


# --- coding.py: erasure coding ----------------------------------------------


class CodingError(FludError):
    code = "CODING"


class BadCodingParameters(CodingError, ValueError):
    code = "BAD_CODING_PARAMETERS"


class BadShares(CodingError, ValueError):
    """Shares given to a decoder are inconsistent (index, length)."""

    code = "BAD_SHARES"


class NotEnoughShares(CodingError):
    code = "NOT_ENOUGH_SHARES"


# --- workers.py: the CPU pool -----------------------------------------------


class PoolSaturated(FludError):
    """Too many CPU jobs are already waiting; the caller should slow down."""

    code = "POOL_SATURATED"


# --- compression.py: contents compressed before encryption -----------------


class CompressionError(FludError):
    code = "COMPRESSION"


class UnknownCompression(CompressionError):
    """A record names a compression method this version cannot undo (written
    by a newer flud, or damaged)."""

    code = "UNKNOWN_COMPRESSION"


class BadCompressedData(CompressionError):
    """Compressed bytes that do not decompress to the recorded size."""

    code = "BAD_COMPRESSED_DATA"


# --- client: records and fetches --------------------------------------------
# Here, below every client module, so the record formats and the fetch
# paths that raise them import nothing of the client's to do so
# (client/records.py and client/repository/segments.py re-export them).


class BadRecord(FludError):
    """A record that is not what its kind says: damaged, or written by a hostile party."""

    code = "BAD_RECORD"


class StoreFailed(FludError):
    """Too few nodes took a segment, an extent or a bundle."""

    code = "STORE_FAILED"


class FetchFailed(FludError):
    """Too few good shares of a segment or a small file could be fetched."""

    code = "FETCH_FAILED"
