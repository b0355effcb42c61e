"""The trust simulation (tools/trust_sim.py), small: the placement rules and
reputation on a simulated clock, against the same world with them off."""
from tools.trust_sim import simulate


def test_a_sybil_host_with_half_the_ids_never_holds_more_than_n_minus_k():
    # 100 ids, half of them one operator's on one host: with plain rendezvous
    # it holds more than n - k shares of many objects
    off = simulate(nodes=100, days=45, seed=3, rules=False, objects_per_day=4, sybil_share=0.5)
    on = simulate(nodes=100, days=45, seed=3, rules=True, objects_per_day=4, sybil_share=0.5)
    assert off["objects_sybil_over_n_minus_k"] > 10
    assert on["objects_sybil_over_n_minus_k"] == 0
    assert on["sybil_most_shares_of_one_object"] <= 1
    assert on["sybil_share_of_placements"] < off["sybil_share_of_placements"] / 2
    assert on["objects_lost"] == 0


def test_reputation_moves_data_off_flaky_nodes_and_they_lose_less():
    off = simulate(nodes=100, days=60, seed=5, rules=False, objects_per_day=5)
    on = simulate(nodes=100, days=60, seed=5, rules=True, objects_per_day=5)
    assert on["flaky_nodes_retired"] >= 1 and on["shares_moved_off_distrusted"] > 0
    assert off["flaky_nodes_retired"] == 0
    assert on["flaky_bytes_lost"] < off["flaky_bytes_lost"]
    assert on["objects_lost"] == 0
