"""What a verify challenges: every share a snapshot uses, once, and the
objects those shares belong to (so a verify can say which of them a restore
could not rebuild).

A version-2 snapshot's set is gathered by walking its tree record by record
(tree_shares.py), as prune's reach does: what is held is one entry per
share, never the snapshot's files. A version-1 manifest gives its set at
once (of_manifest).
"""
from flud.client.records import LARGE, Bundle, content_from_wire

BUNDLE, LARGE_CONTENT = 0, 1   # the order objects are reported in


class ShareSet:
    """snapshot: its id; k: the client's (an extent's k); challenges: the
    recorded VERIFY challenges, get(share key hex) -> list or None;
    damaged: [(path, why)] of the records that could not be read (what they
    hold is not in the set); unconfirmed: why the root may not be the
    newest, or ""."""

    def __init__(self, snapshot: int, k: int, challenges=None):
        self.snapshot = snapshot
        self.k = k
        self.challenges = challenges if challenges is not None else {}
        self.damaged = []
        self.unconfirmed = ""
        self._nodes = {}          # share key hex -> node hex
        self._bundle_keys = set()  # shares of bundles: small enough to fetch whole
        self._objects = {}        # (kind, id) -> (k, holders)

    def __len__(self) -> int:
        return len(self._nodes)

    def add_bundle(self, bundle_id: str, bundle: Bundle) -> None:
        if (BUNDLE, bundle_id) in self._objects:
            return
        self._objects[(BUNDLE, bundle_id)] = (bundle.k, tuple(bundle.holders))
        for holder in bundle.holders:
            self._nodes[holder.key] = holder.node
            self._bundle_keys.add(holder.key)

    def add_large(self, content_id: str, content) -> None:
        """content: a LargeContent (records.py)."""
        if (LARGE_CONTENT, content_id) in self._objects:
            return
        parts = [tuple(part.holders) for part in [*(content.extents or ()),
                                                   *(content.segments or ())]]
        self._objects[(LARGE_CONTENT, content_id)] = (self.k, parts)
        for holder in content.holders():
            self._nodes[holder.key] = holder.node

    def locations(self) -> list:
        """[(share key hex, node hex)] of every share, sorted."""
        return sorted(self._nodes.items())

    def fetchable(self, share_key: str) -> bool:
        """A bundle's share (a few MiB at most) may be fetched whole; an
        extent's stream may be far larger."""
        return share_key in self._bundle_keys

    def resolve_challenges(self, source) -> None:
        """Look every share's challenges up now (source: get(key)), while
        what it reads (the map's cache) is still open."""
        self.challenges = {key: source.get(key) for key in self._nodes}

    def objects(self):
        """(what, k, holders) of every object, bundles first, each by id; a
        large file's content gives one per extent or segment."""
        for (kind, name), (k, holders) in sorted(self._objects.items()):
            if kind == BUNDLE:
                yield f"bundle {name[:16]}", k, holders
            else:
                for part in holders:
                    yield f"large file content {name[:16]}", k, part

    @classmethod
    def of_manifest(cls, manifest: dict) -> "ShareSet":
        """The shares a version-1 manifest names (its own challenges)."""
        shares = cls(manifest.get("snapshot", 0), manifest.get("k", 0),
                     manifest.get("challenges", {}))
        shares.damaged = list(manifest.get("damaged", []))
        shares.unconfirmed = manifest.get("unconfirmed", "")
        for bundle_id, record in manifest.get("bundles", {}).items():
            shares.add_bundle(bundle_id, Bundle.from_wire(record))
        for content_id, record in manifest.get("contents", {}).items():
            content = content_from_wire(record)
            if content.kind == LARGE:
                shares.add_large(content_id, content)
        return shares
