"""Every IShareStore implementation, made for a test: the contract suite and
the storage unit tests run against each."""
import pytest

from flud.storage.disk import ShareStore
from flud.storage.memory import MemoryShareStore

CAPACITY = 64 * 1024 * 1024


@pytest.fixture(params=["memory", "disk"])
def make_store(request, tmp_path):
    """make(capacity) -> a store of the parametrised kind, closed after the test."""
    stores = []

    def make(capacity: int = CAPACITY):
        if request.param == "memory":
            store = MemoryShareStore(capacity)
        else:
            store = ShareStore(tmp_path / f"store{len(stores)}", capacity, fsync=False)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()
