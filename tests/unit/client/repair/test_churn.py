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
