"""A version-2 snapshot flattened into one object in the version-1
manifest's shape (entries, contents, bundles): for the tests and tools that
inspect where things went (tools/snapshot_json.py). Memory follows the
whole listing, so no command uses it: restore and verify walk the tree."""
from twisted.internet import defer

from flud.client.repository.tree_records import LargeRef
from flud.client.repository.tree_walk import Damaged, TreeReader
from flud.client.restore.tree_restore import TreeContents
from flud.errors import FludError


@defer.inlineCallbacks
def flatten(repo, record, k: int, n: int) -> dict:
    """The whole snapshot as a version-1 manifest (entries, contents,
    bundles): for verify, and for tests and tools that read one; memory
    follows the tree. "damaged": [(path, why)] of the records that could not
    be read (a directory's: its subtree is missing; a large file's content
    record: that file is); "records": the blob ids of every record read
    (directories, their continuations, large files' content records), so
    verify can challenge the bundles that hold them too."""
    contents_of = TreeContents(repo)
    entries, contents, bundles = [], {}, {}
    damaged, records = [], set()

    def fetch(blob_id):
        records.add(blob_id)
        return repo.fetch_sealed(blob_id)

    @defer.inlineCallbacks
    def visit(path, dir_entry):
        if dir_entry.kind == "f" and isinstance(dir_entry.ref, LargeRef):
            records.add(dir_entry.ref.content)
        try:
            entry, content = yield contents_of.entry(path, dir_entry)
        except FludError as err:   # BlobDamaged, BadRecord, NewerFormat, a failed fetch
            damaged.append(Damaged(path, f"cannot be read: {err}"))
            return
        entries.append(entry.to_wire())
        if content is not None:
            contents[content[0]] = content[1]
            if content[1]["t"] == "S":
                bundle = repo.bundles.get(content[1]["b"])
                if bundle is None:   # a restore could not fetch it: as unreadable
                    damaged.append(Damaged(path, "its bundle is not in the holder map"))
                else:
                    bundles[content[1]["b"]] = bundle

    yield TreeReader(fetch, repo.sealer).walk(record.tree, visit, damaged.append)
    return {"version": 1, "snapshot": record.snapshot_id, "created": record.time,
            "roots": list(record.paths), "k": k, "n": n, "entries": entries,
            "contents": contents, "bundles": bundles, "challenges": {}, "history": [],
            "damaged": [(d.path, d.why) for d in damaged], "records": sorted(records)}
