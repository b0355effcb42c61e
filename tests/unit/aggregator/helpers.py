"""Building aggregators for tests and reading back what they produced."""

from __future__ import annotations

from flud.aggregator.aggregator import Aggregator
from flud.aggregator.policy import FlushPolicy
from tests.unit.aggregator.fakes import (FakeClock, blake2b_32,
                                         rendezvous_place, xor_encoder)

KIB = 1024
K, N, SPARES = 4, 8, 2
MAX_AGE = 2.0
# Small targets so a few dozen files exercise every sealing path.
TEST_POLICY = FlushPolicy(small_file_limit=8 * KIB, bundle_target=8 * KIB,
                          tar_target=64 * KIB, max_age=MAX_AGE,
                          max_pending_bytes=1024 * KIB)


def make_aggregator(policy=TEST_POLICY, k=K, n=N, spares=SPARES, place=None,
                    encode=None, clock=None):
    clock = clock or FakeClock()
    aggregator = Aggregator(policy, k, n, encode or xor_encoder(k, n),
                            blake2b_32, place or rendezvous_place(), clock,
                            spares=spares)
    return aggregator, clock


def share_in_tars(tars, bundle_id, ref):
    """Bytes of share `ref` of `bundle_id`, read from the tar for its node."""
    found = [tar.data[m.data_offset:m.data_offset + m.length]
             for tar in tars if tar.node == ref.node
             for m in tar.members
             if (m.bundle_id, m.share_index, m.member_key)
             == (bundle_id, ref.index, ref.key)]
    assert len(found) == 1, f"share {ref} found {len(found)} times"
    return found[0]


def bundle_from_primaries(tars, record):
    """Concatenate shares 0..k-1 from the tars: the bundle, zero padded."""
    blocks = [share_in_tars(tars, record.bundle_id, ref)
              for ref in record.shares[:record.k]]
    return b"".join(blocks)[:record.length]


def holders_by_bundle(tars):
    """{bundle_id: [node, ...]} for every member of `tars`."""
    holders = {}
    for tar in tars:
        for member in tar.members:
            holders.setdefault(member.bundle_id, []).append(tar.node)
    return holders
