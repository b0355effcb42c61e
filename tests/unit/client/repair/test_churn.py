"""A short churn simulation (the year-long table is tools/bench/bench_churn.py)."""
from flud.client.repair.churn import DAY, ChurnConfig, simulate


def test_two_percent_a_week_loses_nothing_and_repair_traffic_is_counted():
    result = simulate(ChurnConfig(nodes=16, objects=200, weeks=26, loss_per_week=0.02))
    assert result.departed == 8 and result.lost == 0
    assert result.fewest_shares >= 5
    assert sum(result.recreated) > 0 and sum(result.fetched) == 4 * result.repairs
    assert 0 < result.recreated_bytes_per_gib_week() < result.fetched_bytes_per_gib_week()


def test_heavy_churn_loses_objects_and_the_same_seed_gives_the_same_year():
    config = ChurnConfig(nodes=16, objects=200, weeks=26, loss_per_week=0.25)
    first = simulate(config)
    assert first.lost > 0 and first.fewest_shares < 4
    assert simulate(config) == first


def test_without_repair_the_same_churn_loses_objects():
    result = simulate(ChurnConfig(nodes=16, objects=200, weeks=52, loss_per_week=0.05,
                                  repair=False))
    assert result.lost > 0 and result.repairs == 0


def test_nodes_back_after_their_shares_were_repaired_are_surplus_not_counted_twice():
    result = simulate(ChurnConfig(nodes=16, objects=200, weeks=26, loss_per_week=0.02,
                                  outage_per_week=0.1, outage_days=5, check_every=DAY))
    assert result.outages > 0 and result.lost == 0
    assert result.surplus > 0 and result.overcounted == 0


def test_a_house_leaves_all_at_once_and_as_many_new_nodes_join():
    config = ChurnConfig(nodes=24, objects=100, weeks=12, loss_per_week=0.05, house_size=3)
    result = simulate(config)
    assert result.departed > 0 and result.departed % 3 == 0
    assert simulate(config) == result


def test_under_house_bursts_the_safety_margin_keeps_what_waiting_for_k_loses():
    """Houses of 3 nodes leaving at 10% a week with daily checks and houses
    away for 5 days: repairing only at k confirmed (margin 0, the old rule)
    loses objects, repairing at once at k + 2 loses none and never lets a
    check find an object unreadable."""
    base = dict(nodes=24, objects=300, weeks=26, loss_per_week=0.10, house_size=3,
                outage_per_week=0.04, check_every=DAY)
    old = simulate(ChurnConfig(margin=0, **base))
    new = simulate(ChurnConfig(**base))
    assert old.lost > 0 and old.unavailable > 0
    assert new.lost == 0 and new.unavailable == 0 and new.fewest_shares >= 4
