"""The churn simulation's table (issues 20 and 25): node loss per week against
objects lost and repair traffic, for a year, 4-of-8 objects, under the old
repair rules (repair waits for the grace until only k shares are confirmed:
margin 0) and the new ones (repair at once at k + 2 confirmed: margin 2),
with nodes leaving one by one or a house at a time (3 nodes together).

Pure simulation (flud/client/repair/churn.py): a simulated clock, the real
health rules and placement, no network. Each row is one simulated year.

    .venv/bin/python tools/bench/bench_churn.py [--objects N] [--seed S] [--quick]

Columns: the repair rules (margin), nodes per house, check interval, nodes
leaving per week (and as many joining), nodes that left in the year,
objects lost (fewer than k shares left anywhere), objects a check found
unavailable at some moment (fewer than k on nodes that answered; a restore
then would fail), the fewest shares any object had left, repairs, and MiB
re-created and fetched (k shares per repair) a week per GiB backed up
(objects of 32 MiB before coding). Every row also has houses going down for
5 days and coming back (4% of the nodes a week): the grace's case. A rules
and house size stops its sweep at its first loss; the last lines say at
which loss rate each first lost an object.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from flud.client.repair.churn import DAY, WEEK, ChurnConfig, simulate  # noqa: E402
from flud.client.repair.object_health import SAFETY_MARGIN, default_m  # noqa: E402

MIB = 1 << 20
CHOSEN_M = default_m(4, 8)
OUTAGES = dict(outage_per_week=0.04, outage_days=5.0)


def sweeps(quick: bool):
    """[(fixed config overrides, [loss rates])]: each sweep stops at its first loss."""
    rates = [0.02, 0.05, 0.10, 0.15, 0.20]
    if quick:
        rates = [0.05, 0.10, 0.20]
    out = []
    for check in (DAY, WEEK):
        for margin in (0, SAFETY_MARGIN):
            for house in (1, 3):
                out.append((dict(margin=margin, house_size=house, check_every=check), rates))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer rows and objects")
    args = parser.parse_args()
    objects = min(args.objects, 500) if args.quick else args.objects
    print(f"{objects} objects 4-of-8 of 32 MiB on {args.nodes} nodes, {args.weeks} weeks, "
          f"m = {CHOSEN_M}, grace 3 days, houses down 5 days at 4% of nodes a week, "
          f"seed {args.seed}")
    print(f"{'margin':>6} {'house':>5} {'check':>6} {'loss/wk':>7} {'left':>5} {'lost':>5} "
          f"{'unavail':>7} {'fewest':>6} {'repairs':>7} {'MiB made/GiB/wk':>15} "
          f"{'MiB fetched/GiB/wk':>18}")
    first_loss = []
    started = time.perf_counter()
    for fixed, rates in sweeps(args.quick):
        lost_at = None
        for p in rates:
            config = ChurnConfig(nodes=args.nodes, objects=objects, weeks=args.weeks,
                                 seed=args.seed, m=CHOSEN_M, loss_per_week=p, **OUTAGES, **fixed)
            r = simulate(config)
            check = "weekly" if config.check_every == WEEK else "daily"
            print(f"{config.margin:>6} {config.house_size:>5} {check:>6} {p:>7.1%} "
                  f"{r.departed:>5} {r.lost:>5} {r.unavailable:>7} {r.fewest_shares:>6} "
                  f"{r.repairs:>7} {r.recreated_bytes_per_gib_week() / MIB:>15.1f} "
                  f"{r.fetched_bytes_per_gib_week() / MIB:>18.1f}", flush=True)
            if r.lost:
                lost_at = p
                break
        first_loss.append((fixed, lost_at, rates[-1]))
    for fixed, lost_at, top in first_loss:
        check = "weekly" if fixed["check_every"] == WEEK else "daily"
        where = (f"first lost at {lost_at:.0%} of nodes leaving a week" if lost_at
                 else f"nothing lost up to {top:.0%} a week")
        print(f"margin {fixed['margin']}, houses of {fixed['house_size']}, {check} checks: "
              f"{where}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
