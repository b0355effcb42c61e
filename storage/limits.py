"""Every bound the store enforces, in one place."""

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

KEY_LENGTH = 32  # BLAKE3-256 digest
OWNER_LENGTH = 32  # SHA-256 of the owner's public key
KEY_HEX_LENGTH = 2 * KEY_LENGTH

# Declared-size ceilings; docs/protocol.md carries the same numbers.
MAX_SHARE_SIZE = 1 * GIB
MAX_ARCHIVE_UPLOAD = 256 * MIB

# Unit of every streamed read/copy/hash: memory per operation stays bounded.
IO_CHUNK = 1 * MIB

# Compaction: rewrite an archive once more than this share of it is dead ...
COMPACT_GARBAGE_RATIO = 0.5
# ... and only if it is big enough for the rewrite to pay off.
COMPACT_MIN_BYTES = 1 * MIB

KIND_SHARE = "share"
KIND_ARCHIVE = "archive"
# A share whose key is only known once it is all sent: the key follows its data.
KIND_STREAMED_SHARE = "streamed share"
KINDS = (KIND_SHARE, KIND_ARCHIVE, KIND_STREAMED_SHARE)
