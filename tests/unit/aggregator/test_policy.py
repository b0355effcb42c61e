import pytest

from flud.aggregator.policy import (DEFAULT_BUNDLE_TARGET, DEFAULT_MAX_AGE,
                               DEFAULT_MAX_PENDING_BYTES,
                               DEFAULT_SMALL_FILE_LIMIT, DEFAULT_TAR_TARGET,
                               MIB, FlushPolicy)


def test_defaults():
    policy = FlushPolicy()
    assert policy.small_file_limit == DEFAULT_SMALL_FILE_LIMIT == MIB
    assert policy.bundle_target == DEFAULT_BUNDLE_TARGET == MIB
    assert policy.tar_target == DEFAULT_TAR_TARGET == 4 * MIB
    assert policy.max_age == DEFAULT_MAX_AGE == 2.0
    assert policy.max_pending_bytes == DEFAULT_MAX_PENDING_BYTES == 32 * MIB


def test_bundle_and_tar_full_at_their_target():
    policy = FlushPolicy(bundle_target=100, tar_target=400,
                         max_pending_bytes=1000)
    assert not policy.bundle_full(99)
    assert policy.bundle_full(100)
    assert not policy.tar_full(399)
    assert policy.tar_full(400)


def test_tar_expires_once_max_age_has_passed():
    policy = FlushPolicy(max_age=2.0)
    assert not policy.tar_expired(opened_at=10.0, now=11.999)
    assert policy.tar_expired(opened_at=10.0, now=12.0)
    assert policy.tar_expired(opened_at=10.0, now=50.0)


def test_over_pending_at_the_bound():
    policy = FlushPolicy(max_pending_bytes=10 * MIB)
    assert not policy.over_pending(10 * MIB - 1)
    assert policy.over_pending(10 * MIB)


@pytest.mark.parametrize("field", ["small_file_limit", "bundle_target",
                                   "tar_target", "max_pending_bytes"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_sizes_must_be_positive_ints(field, bad):
    with pytest.raises(ValueError, match=field):
        FlushPolicy(**{field: bad})


@pytest.mark.parametrize("bad", [0, -1.0, True, "2", float("nan")])
def test_max_age_must_be_positive(bad):
    with pytest.raises(ValueError, match="max_age"):
        FlushPolicy(max_age=bad)


def test_pending_bound_must_leave_room_for_the_bundle():
    with pytest.raises(ValueError, match="bundle_target"):
        FlushPolicy(bundle_target=MIB, max_pending_bytes=2 * MIB,
                    tar_target=MIB)
    FlushPolicy(bundle_target=MIB, max_pending_bytes=2 * MIB + 1,
                tar_target=MIB)


def test_tar_target_cannot_exceed_pending_bound():
    with pytest.raises(ValueError, match="tar_target"):
        FlushPolicy(tar_target=33 * MIB)


def test_negative_size_is_refused():
    with pytest.raises(ValueError, match="negative"):
        FlushPolicy().bundle_full(-1)


def test_policy_is_frozen():
    with pytest.raises(AttributeError):
        FlushPolicy().max_age = 5
