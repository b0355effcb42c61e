"""The version-1 manifest writer of the old release, kept for tests only:
production code writes version 2 (docs/snapshots.md) and only reads
version 1 (flud/client/repository/version1_reader.py)."""
import json
import zlib

from flud.client.records import bundle_of
from flud.client.repository.root_store import COMPRESS_LEVEL
from flud.errors import FludError


class ManifestIncomplete(FludError):
    """An entry's content (or its bundle) is not in the index: an index bug."""

    code = "MANIFEST_INCOMPLETE"


# Entries are JSON-encoded this many at a time, and the JSON goes to the
# compressor in pieces of about FLUSH_AT bytes.
ENTRY_BATCH = 256
FLUSH_AT = 64 * 1024
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class _Compressor:
    """JSON text in pieces in, zlib out: the manifest's JSON is never whole."""

    def __init__(self, headroom: int = 0):
        self._zlib = zlib.compressobj(COMPRESS_LEVEL)
        self._pending = []
        self._size = 0
        self.out = bytearray(headroom)  # room for a seal's nonce in front

    def write(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._size += len(piece)
        if self._size >= FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        self.out += self._zlib.compress(b"".join(self._pending))
        self._pending.clear()
        self._size = 0

    def finish(self) -> bytearray:
        self._flush()
        self.out += self._zlib.flush()
        return self.out


def _write_object(out, rows, wanted, seen) -> None:
    """'{"key":record,...}' of the index rows whose key is wanted (records are
    the index's compact JSON, written as they are); each record goes to seen."""
    out.write(b"{")
    first = True
    for key, blob in rows:
        if key in wanted:
            out.write((b"" if first else b",") + _ENCODE(key).encode() + b":" + blob)
            first = False
            seen(key, blob)
    out.write(b"}")


def build_manifest(index, head: dict, entries: list, history: list,
                   headroom: int = 0) -> bytearray:
    """The zlib-compressed JSON of a manifest (see _compress_json), streamed:
    contents, bundles and challenges are read from the index a row at a time
    and only the keys of what this snapshot uses are kept (a 1 GiB file's
    manifest built as one dict peaked ~8 MB above the upload). head: the
    small fields (version, snapshot, created, roots, k, n). entries: [Entry].
    headroom: zero bytes in front, for seal_in_place."""
    out = _Compressor(headroom)
    out.write(_ENCODE(head)[:-1].encode() + b',"entries":[')
    for start in range(0, len(entries), ENTRY_BATCH):
        batch = _ENCODE(entries_to_wire(entries[start:start + ENTRY_BATCH]))[1:-1].encode()
        out.write((b"," if start else b"") + batch)
    needed = {e.last for e in entries if e.is_file}
    bundles, used, found = set(), set(), []

    # The index's records are read as JSON, not made into records: a row
    # at a time, only their bundle and share keys are kept.
    def content_seen(cid, blob):
        record = json.loads(blob)
        found.append(cid)
        bundle = bundle_of(record)
        if bundle is not None:
            bundles.add(bundle)
        used.update(holder_keys_from_wire(record))

    def bundle_seen(bid, blob):
        found.append(bid)
        used.update(holder_keys_from_wire(json.loads(blob)))

    out.write(b'],"contents":')
    _write_object(out, index.content_rows(), needed, content_seen)
    if len(found) != len(needed):
        raise ManifestIncomplete(f"{len(needed) - len(found)} content record(s) of this "
                                 f"snapshot are missing from the index")
    found.clear()
    out.write(b',"bundles":')
    _write_object(out, index.bundle_rows(), bundles, bundle_seen)
    if len(found) != len(bundles):
        raise ManifestIncomplete(f"{len(bundles) - len(found)} bundle record(s) of this "
                                 f"snapshot are missing from the index")
    out.write(b',"challenges":')
    _write_object(out, index.challenge_rows(), used, lambda key, blob: None)
    out.write(b',"history":' + _ENCODE(history).encode() + b"}")
    return out.finish()


def manifest_ref_to_wire(size: int, segments) -> dict:
    """Where a manifest is: {"size": sealed bytes, "segs": [stored segment]}."""
    return {"size": size, "segs": [s.to_wire() for s in segments]}


# Test-only writers of the version-1 shapes (the release that wrote them is gone).
def entries_to_wire(entries) -> list:
    return [e.to_wire() for e in entries]


def holder_keys_from_wire(content_or_bundle) -> list:
    """The share keys a content or bundle record, as written, uses (for the
    manifest's challenges: read without making the records)."""
    keys = []
    for seg in content_or_bundle.get("segs", ()):
        keys.extend(s[1] for s in seg[3])
    for extent in content_or_bundle.get("ext", ()):
        keys.extend(s[1] for s in extent["shares"])
    keys.extend(s[1] for s in content_or_bundle.get("shares", ()))
    return keys
