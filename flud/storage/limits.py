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

# Bytes promised to unfinished uploads (reserved at open, before any byte
# arrives) that one party may hold, so that a sender who declares uploads and
# sends nothing cannot promise a node's space away from everyone else.
#
# Per group (the node makes one per connection): 256 MiB and 128 uploads. The
# most an honest flud client has open on one node is 6 extent streams (3
# large files, each sending one extent while its previous one commits) of
# 32 MiB / k each, plus its tars not yet confirmed (the aggregator holds at
# most 32 MiB of them) and a manifest segment's share: ~81 MiB at the default
# 4-of-8, ~226 MiB at k = 1; 6 streams plus at most 16 tars in flight. 256 MiB
# is also MAX_ARCHIVE_UPLOAD, so any legal archive upload fits alone. The
# count bounds the temporary files (and descriptors) one connection holds
# whatever their sizes: half of the 256 requests a connection may have open,
# so a load generator's 128 sessions under one identity (check_load's sweep)
# still fit on one node.
MAX_GROUP_RESERVED = 256 * MIB
MAX_GROUP_UPLOADS = 128
# Per owner (sender identity), over all its connections: 1/32 of capacity,
# so one identity leaves at least 31/32 (97%) of a node's space to everyone
# else, and a few colluding ones still leave over 90%; never less than one
# group's bound, or a small node would refuse an honest client (below 8 GiB
# of capacity that floor rules: 256 MiB is 10% of 2.5 GiB).
OWNER_RESERVED_DIVISOR = 32

# Unit of every streamed read/copy/hash: memory per operation stays bounded.
IO_CHUNK = 1 * MIB

# Compaction: rewrite an archive once more than this share of it is dead ...
# A threshold t keeps an archive within 1/(1-t) of its live bytes and copies
# (1-t)/t live bytes per byte it reclaims. 0.2: at most 1.25x (issue 19's
# bound for a whole network's bytes), 4 bytes copied per byte reclaimed:
# ~3.2 s of node CPU and 4 GB read + 4 GB written per GB reclaimed, measured
# (docs/DESIGN.md, "Leases, trash and compaction"; tools/bench/bench_compaction.py).
COMPACT_GARBAGE_RATIO = 0.2
# ... and only if it is big enough for the rewrite to pay off.
COMPACT_MIN_BYTES = 1 * MIB

KIND_SHARE = "share"
KIND_ARCHIVE = "archive"
# A share whose key is only known once it is all sent: the key follows its data.
KIND_STREAMED_SHARE = "streamed share"
KINDS = (KIND_SHARE, KIND_ARCHIVE, KIND_STREAMED_SHARE)
