"""One memory budget plan per run (client/budget_plan.py): the backup's send
queues and its small files' aggregator divide the budget by the same plan,
and a repair reserves its working set from the budget too (issue 26)."""
import os
import random

from flud.client.budget_plan import BudgetPlan, plan_budget, repair_working_bytes
from flud.client.repair.check_job import REPAIR_IN_FLIGHT
from flud.client.repair.repository_check import Check
from flud.client.repair.stream_repair import CHUNK
from flud.client.backup.backup_job import Backup
from flud.client.progress import Progress
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_check_run import ctx_of

MIB = 1024 * 1024


def test_the_plan_leaves_for_the_aggregator_what_the_network_and_segments_do_not_take():
    plan = plan_budget(64 * MIB, 50, segment_footprint=6 * MIB, parallel_files=2)
    assert plan.network_bytes == plan.allowance + plan.connections > 0
    assert plan.left() == 64 * MIB - plan.network_bytes - 12 * MIB
    assert plan.left(MIB, 2 * MIB) == plan.left() - 3 * MIB
    # a repair never asks for more than the budget beside the connections
    assert plan.repair_bytes(10 ** 12) == 64 * MIB - plan.network_bytes
    assert plan.repair_bytes(MIB) == MIB
    assert BudgetPlan(MIB, MIB, MIB).repair_bytes(MIB) == 0


def _tree(root, files=40, big=2 * MIB):
    rng = random.Random(3)
    os.makedirs(root)
    for i in range(files):
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(10, 5000)))
    with open(os.path.join(root, "big"), "wb") as f:
        f.write(rng.randbytes(big))


def test_a_backup_computes_its_plan_once_and_every_part_reserves_by_it(tmp_path):
    world = make_world(tmp_path, nodes=10)
    clock, home, network = world
    _tree(str(tmp_path / "src"))
    given = []
    count_sends = network.count_sends
    network.count_sends = lambda monitor, plan=None: given.append(plan) or \
        count_sends(monitor, plan)
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=64 * MIB)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds)
    plan = job.budget_plan
    assert plan.segment_footprint == job.large.segment_footprint > 0
    assert plan.parallel_files == job.parallel_files
    assert job.small.plan is plan
    summary = run_until(clock, job.run([str(tmp_path / "src")]))
    assert summary["new"] == 41
    assert given == [plan]   # the send queues reserved by the same plan, once


def test_a_repair_reserves_its_working_set_from_the_budget(tmp_path):
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    _tree(str(tmp_path / "src"))
    from tests.unit.client.test_pipeline import run_backup
    run_backup(world, [str(tmp_path / "src")])
    # the two nodes holding the most (placement is random: two fixed nodes may hold nothing)
    busiest = sorted(network.nodes.values(), key=lambda n: n.store.owner_bytes(network.client_id))
    assert busiest[-2].store.owner_bytes(network.client_id) > 0
    for node in busiest[-2:]:
        node.up = False
    ctx = ctx_of(world)
    reserved = []
    transfer = ctx.monitor.transfer

    def watched(kind, name):
        made = transfer(kind, name)
        if kind == "repair":
            reserve = made.reserve
            made.reserve = lambda nbytes, what: reserved.append(nbytes) or reserve(nbytes, what)
        return made

    ctx.monitor.transfer = watched
    report = run_until(clock, Check(ctx, repair=True, grace=0.0).run(), limit=2_000_000)
    assert report.moved   # something was repaired, inside the reservation
    k, n = home.config["k"], home.config["n"]
    plan = plan_budget(ctx.monitor.budget_bytes, len(network.nodes))
    assert reserved == [plan.repair_bytes(repair_working_bytes(k, n, CHUNK, REPAIR_IN_FLIGHT))]
    assert reserved[0] > 0
    assert ctx.monitor.reserved_bytes == 0   # all of it back once the run is over
