"""Every client job renews this owner's lease on every node it knows, at most
once a week (a node trashes an owner it has not heard from for its lease):
at the job's start, so a job that fails renewed all the same; recorded only
when most known nodes answered; whatever this machine's clock did."""
import argparse
import os
from types import SimpleNamespace

import pytest
from twisted.internet import defer

from flud.cli import jobs
from flud.cli.exits import UserError
from flud.client.lease_renewal import (DAY, META, RENEW_EVERY, kept_until, kept_until_line,
                                renew_leases)
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_pipeline import run_backup

T = 1_000_000_000.0


def watch(network) -> list:
    """The nodes asked for STATS (the renewal's question), in order."""
    asked = []
    original = network.call

    def watching(node_id, method, *args, **kwargs):
        if method == "stats":
            asked.append(node_id)
        return original(node_id, method, *args, **kwargs)
    network.call = watching
    return asked


def renew(world, now):
    clock, home, network = world
    ctx = SimpleNamespace(index=home.index, network=network)
    return run_until(clock, renew_leases(ctx, now=lambda: now))


def source(tmp_path) -> str:
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "a.txt"), "wb") as f:
        f.write(b"alpha")
    return src


def test_a_backup_touches_every_node_once_a_week(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = source(tmp_path)
    now = [T]
    monkeypatch.setattr("flud.client.lease_renewal.wall_clock", lambda: now[0])
    asked = watch(network)
    # (every head writer also asks every node for the root: client/repository/head_chain.py;
    # the renewal itself is what the index records)
    run_backup(world, [src])
    assert set(asked) >= set(network.nodes)          # every node heard from us
    renewed = home.index.get_meta("leases_renewed")
    assert renewed == now[0]
    asked.clear()
    now[0] += 3 * DAY
    run_backup(world, [src])
    assert home.index.get_meta("leases_renewed") == renewed   # not due again within the week
    asked.clear()
    now[0] += 5 * DAY
    run_backup(world, [src])
    assert set(asked) >= set(network.nodes)
    assert home.index.get_meta("leases_renewed") == now[0]


def test_a_renewal_no_node_answered_is_not_recorded(tmp_path):
    world = make_world(tmp_path, nodes=6)
    _, home, network = world
    for node in network.nodes.values():
        node.up = False
    assert renew(world, T) == 0
    assert home.index.get_meta(META) is None and kept_until(home.index) is None
    for node in network.nodes.values():
        node.up = True
    asked = watch(network)
    assert renew(world, T + 3600) == 6  # the next job tries again at once
    assert set(asked) == set(network.nodes)
    assert kept_until(home.index)["renewed"] == T + 3600


@pytest.mark.parametrize("down, recorded", [(6, False), (5, True)])
def test_a_renewal_is_recorded_only_when_most_known_nodes_answered(tmp_path, down, recorded):
    world = make_world(tmp_path, nodes=12)
    _, home, network = world
    for node in list(network.nodes.values())[:down]:
        node.up = False
    assert renew(world, T) == 12 - down
    assert (home.index.get_meta(META) == T) is recorded


def test_a_clock_that_went_backwards_still_renews(tmp_path):
    world = make_world(tmp_path, nodes=6)
    _, home, network = world
    renew(world, T)
    asked = watch(network)
    back = T - 30 * DAY  # this machine's clock was set back a month
    assert renew(world, back) == 6 and set(asked) == set(network.nodes)
    assert home.index.get_meta(META) == back
    asked.clear()
    assert renew(world, back + 3 * DAY) == 0 and not asked  # weekly again from there
    assert renew(world, back + RENEW_EVERY) == 6


def test_the_date_shown_is_the_renewal_plus_the_shortest_lease_reported(tmp_path):
    world = make_world(tmp_path, nodes=6)
    _, home, network = world
    assert kept_until_line(home.index).startswith("leases: not renewed yet")
    list(network.nodes.values())[2].lease_seconds = 100 * DAY
    renew(world, T)
    assert kept_until(home.index) == {"renewed": T, "lease_seconds": 100 * DAY,
                                      "kept_until": T + 100 * DAY}
    assert "until at least " in kept_until_line(home.index)
    assert "100-day lease" in kept_until_line(home.index)


def test_a_backup_that_fails_still_renewed_the_leases(tmp_path, monkeypatch):
    """flud/cli/jobs.py renews before the job runs: here a backup that stops
    at once (5 nodes known, n=8) leaves the leases renewed and says so."""
    world = make_world(tmp_path, nodes=5)
    clock, home, network = world
    network.discover = lambda enough=None: defer.succeed(len(network.nodes))
    monkeypatch.setattr("flud.client.network.Network", lambda *args, **kwargs: network)
    args = argparse.Namespace(paths=[source(tmp_path)], exclude=[], tag=[],
                              parallel_files=None, summary={})
    with pytest.raises(UserError, match="only 5 nodes are known"):
        run_until(clock, jobs._job(clock, home, args, "backup"))
    assert kept_until(home.index) is not None
    assert args.summary["leases"] == kept_until(home.index)
