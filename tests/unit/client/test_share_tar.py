"""Repair's tars come from the bundle sender's one tar path (issue 26):
share_tar writes whole shares as the aggregator writes its tars, under the
tar's BLAKE3, and a standard tar reader finds every share in order."""
import io
import tarfile

import blake3

from flud.client.repository.bundle_sender import share_tar


def test_a_share_tar_holds_each_share_under_its_key_and_is_stored_under_its_hash():
    shares = [(blake3.blake3(bytes([i]) * (1000 + i)).hexdigest(), bytes([i]) * (1000 + i))
              for i in range(3)]
    key, data = share_tar(iter(shares))
    assert key == blake3.blake3(data).digest()
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        read = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    assert read == shares
