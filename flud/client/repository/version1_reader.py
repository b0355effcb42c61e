"""Version 1, read: the manifest (the "master file list") an older flud
wrote, the one place version 1 lives besides the root it is named by
(root_store.find_root) and the map index's list of version-1 snapshots.

A manifest holds everything a restore needs: every entry (path, kind, mode,
mtime, size), where each content is, the bundles, the VERIFY challenges, and
the list of earlier snapshots. It is JSON, zlib-compressed, sealed with
AES-GCM under a key derived from the user secret, stored like a large file
(segments, k-of-n). Nothing writes one any more; tests read the ones the
old release wrote (tests/unit/client/data/).
"""
from twisted.internet import defer

from flud.client.records import manifest_ref_segments
from flud.client.repository.blobs import open_json
from flud.client.repository.segments import fetch_segment

MANIFEST_VERSION = 1


@defer.inlineCallbacks
def fetch_manifest(network, pool, coder, secret, manifest_ref):
    parts = []
    for segment in manifest_ref_segments(manifest_ref):
        data = yield fetch_segment(network, pool, coder, secret, segment.fetch())
        parts.append(data)
    return open_json(secret, "manifest", b"".join(parts))
