"""Version-2 records travel like small files: a sealed blob added to the
backup's aggregator lands in a bundle, and its range there reads it back."""
import os
import random

from twisted.internet import defer

from flud.client.backup.backup_job import Backup
from flud.client.repository.blobs import BlobSealer
from flud.client.progress import Progress
from flud.client.records import FILE, Bundle
from flud.client.backup.source_scan import scan
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until

MIB = 1024 * 1024


def fetch_range(network, bundle: Bundle, ref):
    """The blob's bytes from the primary shares that hold its range."""
    block = bundle.block_length
    parts = []
    for index in range(ref.offset // block, (ref.offset + ref.length - 1) // block + 1):
        holder = next(h for h in bundle.holders if h.index == index)
        start = max(ref.offset, index * block) - index * block
        end = min(ref.offset + ref.length, (index + 1) * block) - index * block
        parts.append(network.call(bytes.fromhex(holder.node), "retrieve",
                                  bytes.fromhex(holder.key), start, end - start))
    return defer.gatherResults(parts).addCallback(b"".join)


def test_records_land_in_bundles_beside_small_files_and_read_back(tmp_path):
    clock, home, network = make_world(tmp_path, nodes=12)
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=64 * MIB)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds)
    sealer = BlobSealer(home.secret)
    rng = random.Random(3)
    records = [sealer.seal(rng.randbytes(rng.randint(100, 300_000))) for _ in range(12)]
    src = tmp_path / "src"
    os.makedirs(src)
    for i in range(30):
        (src / f"f{i}").write_bytes(rng.randbytes(2000))
    files = []

    @defer.inlineCallbacks
    def backup():
        small = job.small
        small.open(with_files=True)
        entries = [e for e in scan([str(src)]).entries if e.kind == FILE]
        content_of = {}
        yield small.send_all(entries, content_of)
        for blob_id, sealed in records:
            yield small.add_blob(blob_id.hex(), sealed)
        yield small.finish()
        small.close()
        files.extend(content_of.values())
        return small.records()

    bundles, _ = run_until(clock, backup())
    refs = {ref.blob_id: ref for ref in job.small.blob_refs}
    assert set(refs) == {blob_id.hex() for blob_id, _ in records}
    assert len(files) == 30 and len(job.contents.new) == 30   # the files are contents as before
    for blob_id, sealed in records:
        ref = refs[blob_id.hex()]
        got = run_until(clock, fetch_range(network, bundles[ref.bundle], ref))
        assert sealer.open(blob_id, got) == sealer.open(blob_id, sealed)
    assert monitor.reserved_bytes == 0 and monitor.buffered_bytes == 0
