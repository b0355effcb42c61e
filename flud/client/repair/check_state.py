"""What a check keeps between runs, as one pure record the caller persists.

- rotation: how far the sweep of shares has come (rotation.py);
- book: what checks have seen of nodes and shares (health.py);
- moved: shares a repair stored on new nodes that the holder map does not
  name yet ({object id: [(index, share key, new node)]}). The caller writes
  them into a map page and then calls recorded(); until then every run
  reads the objects with these holders, so a repair interrupted after its
  stores (or before its page was written) is neither redone nor lost.

The caller saves to_wire() after every repaired object (the job's
on_progress), so an interrupted repair resumes where it stopped: objects
already moved are not fetched again, the rest are found degraded again.
"""
from typing import Iterable

from flud.client.records import ShareHolder
from flud.client.repair.object_health import HealthBook, StoredObject
from flud.client.repair.rotation import RotationState

STATE_VERSION = 1


class CheckState:
    def __init__(self, rotation: RotationState = None, book: HealthBook = None, moved=None):
        self.rotation = rotation or RotationState()
        self.book = book or HealthBook()
        self.moved = dict(moved or {})

    def record_move(self, object_id: str, rows) -> None:
        merged = {index: (index, key, node) for index, key, node in self.moved.get(object_id, ())}
        merged.update((index, (index, key, node)) for index, key, node in rows)
        self.moved[object_id] = sorted(merged.values())

    def recorded(self, object_ids: Iterable[str] = None) -> None:
        """The holder map now names these objects' moves (all, by default)."""
        if object_ids is None:
            self.moved.clear()
        for object_id in object_ids or ():
            self.moved.pop(object_id, None)

    def current(self, obj: StoredObject) -> StoredObject:
        """The object with the holders repairs gave it, newest first."""
        rows = self.moved.get(obj.object_id)
        if not rows:
            return obj
        new = {index: node for index, _key, node in rows}
        return obj._replace(shares=tuple(ShareHolder(s.index, s.key, new.get(s.index, s.node))
                                         for s in obj.shares))

    def to_wire(self) -> dict:
        return {"v": STATE_VERSION, "rotation": self.rotation.to_wire(),
                "book": self.book.to_wire(),
                "moved": {oid: [list(r) for r in rows] for oid, rows in sorted(self.moved.items())}}

    @classmethod
    def from_wire(cls, value: dict) -> "CheckState":
        if value.get("v") != STATE_VERSION:
            raise ValueError(f"a check state of version {value.get('v')!r}; "
                             f"this flud reads {STATE_VERSION}")
        return cls(RotationState.from_wire(value["rotation"]),
                   HealthBook.from_wire(value["book"]),
                   {oid: [tuple(r) for r in rows] for oid, rows in value["moved"].items()})
