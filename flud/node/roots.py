"""One small root record per owner: the client's pointer to its manifest.

A file per owner, replaced atomically; the node cannot read the record (the
client encrypts it) and only the authenticated owner can fetch or replace it.
"""
import os

from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.messages import MAX_ROOT_RECORD


def _sync_directory(directory: str) -> None:
    """fsync the directory: the rename that replaced a root is on disk only
    once its directory is (a power cut could otherwise bring back the old
    root, an authentic and stale one, after the client was told it was kept)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RootStore:
    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, owner: bytes) -> str:
        return os.path.join(self.directory, owner.hex())

    def put(self, owner: bytes, record: bytes) -> None:
        if len(record) > MAX_ROOT_RECORD:
            raise RemoteError(ErrorCode.TOO_LARGE, f"root record is over {MAX_ROOT_RECORD} bytes")
        path = self._path(owner)
        temp = path + ".tmp"
        with open(temp, "wb") as f:
            f.write(record)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
        _sync_directory(self.directory)

    def get(self, owner: bytes) -> bytes:
        try:
            with open(self._path(owner), "rb") as f:
                return f.read(MAX_ROOT_RECORD + 1)[:MAX_ROOT_RECORD]
        except FileNotFoundError:
            raise RemoteError(ErrorCode.NOT_FOUND, "no root record for you here") from None

    def remove(self, owner: bytes) -> None:
        """Forget owner's record (its data was purged: flud/node/leases.py)."""
        try:
            os.unlink(self._path(owner))
        except FileNotFoundError:
            pass

    def count(self) -> int:
        return sum(1 for name in os.listdir(self.directory) if not name.endswith(".tmp"))
