"""The churn simulation's table (issue 20): node loss per week against objects
lost and repair traffic, for a year, k-of-n 4-of-8 objects, repair at m.

Pure simulation (flud/client/repair/churn.py): a simulated clock, the real
health rules and placement, no network. Each row is one simulated year.

    .venv/bin/python tools/bench/bench_churn.py [--objects N] [--seed S] [--quick]

Columns: nodes, m, check interval, nodes leaving per week (and as many
joining), nodes that left in the year, objects lost (fewer than k shares
left), the fewest shares any object had left, repairs, shares re-created a
week, and MiB re-created and fetched (k shares per repair) a week per GiB
backed up (objects of 32 MiB before coding). The last lines state the loss
rate above which the chosen m and weekly checks stop holding.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from flud.client.repair.churn import DAY, WEEK, ChurnConfig, simulate  # noqa: E402
from flud.client.repair.health import default_m  # noqa: E402

MIB = 1 << 20
CHOSEN_M = default_m(4, 8)


def rows(quick: bool):
    """(config overrides, label) of every row."""
    m = CHOSEN_M
    sweep_50 = [0.01, 0.02, 0.03, 0.035, 0.04, 0.05, 0.10]
    sweep_16 = [0.02, 0.05, 0.075, 0.10]
    if quick:
        sweep_50, sweep_16 = [0.02, 0.035, 0.05], [0.02, 0.10]
    out = [dict(nodes=50, m=m, loss_per_week=p) for p in sweep_50]
    out += [dict(nodes=16, m=m, loss_per_week=p) for p in sweep_16]
    for other in (m - 1, m + 1):
        out += [dict(nodes=50, m=other, loss_per_week=p) for p in (0.02, 0.05)]
    out += [dict(nodes=50, m=m, loss_per_week=p, check_every=DAY) for p in (0.05, 0.10)]
    out.append(dict(nodes=50, m=m, loss_per_week=0.02, repair=False))
    out.append(dict(nodes=50, m=m, loss_per_week=0.02, outage_per_week=0.04, check_every=DAY))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer rows")
    args = parser.parse_args()
    header = (f"{'nodes':>5} {'m':>2} {'check':>6} {'loss/wk':>7} {'left':>5} {'lost':>5} "
              f"{'fewest':>6} {'repairs':>7} {'shares/wk':>9} {'MiB made/GiB/wk':>15} "
              f"{'MiB fetched/GiB/wk':>18}  note")
    print(f"{args.objects} objects 4-of-8 of 32 MiB, {args.weeks} weeks, grace 3 days, "
          f"seed {args.seed}")
    print(header)
    first_loss = {}
    started = time.perf_counter()
    for overrides in rows(args.quick):
        config = ChurnConfig(objects=args.objects, weeks=args.weeks, seed=args.seed, **overrides)
        result = simulate(config)
        check = "weekly" if config.check_every == WEEK else f"{config.check_every / DAY:g}d"
        note = "" if config.repair else "checks only, no repair"
        if config.outage_per_week:
            note = (f"{result.outages} outages of {config.outage_days:g} days: "
                    f"{result.surplus} surplus copies, {result.overcounted} counted twice")
        print(f"{config.nodes:>5} {config.m:>2} {check:>6} {config.loss_per_week:>7.1%} "
              f"{result.departed:>5} {result.lost:>5} {result.fewest_shares:>6} "
              f"{result.repairs:>7} {result.per_week(result.recreated):>9.1f} "
              f"{result.recreated_bytes_per_gib_week() / MIB:>15.1f} "
              f"{result.fetched_bytes_per_gib_week() / MIB:>18.1f}  {note}", flush=True)
        if (config.m == CHOSEN_M and config.check_every == WEEK and result.lost
                and config.repair and not config.outage_per_week):
            first_loss.setdefault(config.nodes, config.loss_per_week)
    for nodes, p in sorted(first_loss.items(), reverse=True):
        print(f"{nodes} nodes, m={CHOSEN_M}, weekly checks: objects are first lost at "
              f"{p:.1%} of nodes leaving a week (none below it in this table)")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
