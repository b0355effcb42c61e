"""The give-to-get ledger over a population (flud/trust/ledger_sim.py), small
enough for the unit suite: free riders and liars stay within their grant
on every node; honest owners store what their node gives, times the ratio."""
from flud.trust.ledger_sim import FREE_RIDER, HONEST, LIAR, LedgerSim, SimConfig


def run(**overrides):
    config = SimConfig(**{"nodes": 150, "days": 40, "seed": 7, **overrides})
    return config, LedgerSim(config).run()


def test_free_riders_and_liars_stay_within_their_grant_honest_nodes_earn_the_ratio():
    config, result = run()
    kinds = result["kinds"]
    for kind in (FREE_RIDER, LIAR):
        assert 0 < kinds[kind]["max_held_on_one_node"] <= config.grant
        assert kinds[kind]["given_per_owner"] == 0
        assert kinds[kind]["stored_per_owner"] < kinds[kind]["wanted_per_owner"] / 2
    honest = kinds[HONEST]
    assert honest["stored_per_owner"] == honest["wanted_per_owner"]   # never refused
    assert abs(honest["stored_over_given"] - config.ratio) < 0.05
    assert honest["max_held_on_one_node"] > config.grant
    assert result["refused_quota"] > 0


def test_a_lower_ratio_and_a_full_node_bound_what_an_honest_owner_stores():
    config, result = run(ratio=0.5, capacity=256 << 20, daily=32 << 20)
    honest = result["kinds"][HONEST]
    # it stores at most ratio x given plus a grant on each node it uses
    bound = config.ratio * honest["given_per_owner"] + config.grant * honest["nodes_holding_per_owner"]
    assert honest["stored_per_owner"] <= bound * 1.01
    assert honest["stored_per_owner"] < honest["wanted_per_owner"]
    assert result["refused_full"] > 0 or result["refused_quota"] > 0


def test_the_same_seed_gives_the_same_year():
    assert run(nodes=60, days=15)[1] == run(nodes=60, days=15)[1]
