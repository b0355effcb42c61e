"""What the aggregator hands back to the client: records, and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, NamedTuple


@dataclass(frozen=True)
class FileSlice:
    """A file's ciphertext occupies bundle bytes [offset, offset + length)."""
    file_id: Hashable
    offset: int
    length: int


@dataclass(frozen=True)
class ShareRef:
    """Share `index` of a bundle, named `key`, is (to be) stored on `node`."""
    index: int
    key: bytes
    node: str


@dataclass
class BundleRecord:
    """Everything the client index needs to find and rebuild a bundle.

    Shares 0..k-1 are the bundle's blocks (systematic code): a file's bytes
    are read back from block offset // block_length onward without decoding.
    """
    bundle_id: bytes
    length: int          # bundle bytes before zero padding
    k: int
    n: int
    block_length: int    # L = ceil(length / k); shares are L bytes each
    shares: list[ShareRef]
    files: list[FileSlice]
    spares: list[str]    # unused nodes of the preference list, in order


class TarMember(NamedTuple):
    """One share inside a sealed tar."""
    member_key: bytes
    bundle_id: bytes
    share_index: int
    data_offset: int     # where the share's bytes start inside the tar
    length: int


@dataclass(frozen=True)
class SealedTar:
    """A tar ready to be sent to `node` as one STORE under `key`.

    `serial` numbers the tars of one Aggregator in opening order (a tar has
    it from its first member on: see Aggregator.pending_tars()); confirm()
    and replace() identify the tar by it. `data` is the tar's own buffer
    (a bytearray, not a copy): do not change it.
    """
    node: str
    data: bytes | bytearray
    key: bytes
    members: list[TarMember] = field(repr=False)
    serial: int


@dataclass(frozen=True)
class ShareMove:
    """replace() moved share `index` of a bundle from one node to another."""
    bundle_id: bytes
    index: int
    key: bytes
    from_node: str
    to_node: str


class PlacementExhausted(Exception):
    """A share must move, but every spare of its bundle is used or failed."""

    def __init__(self, bundle_id: bytes, failed_node: str) -> None:
        self.bundle_id = bundle_id
        self.failed_node = failed_node
        super().__init__(
            f"bundle {bundle_id.hex()} has no spare node left to take the "
            f"share that {failed_node!r} failed to store; place it again "
            f"with a longer preference list (larger `spares`)")


class DrainRequired(Exception):
    """add() was called while the aggregator held too many bytes."""

    def __init__(self, pending_bytes: int, limit: int) -> None:
        self.pending_bytes = pending_bytes
        self.limit = limit
        super().__init__(
            f"aggregator holds {pending_bytes} bytes, limit {limit}: send "
            f"take_sealed() tars and confirm() or replace() them before "
            f"adding more (check must_drain() before add())")
