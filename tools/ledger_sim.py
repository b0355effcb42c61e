"""Give to get over 1,000 nodes for a simulated year (flud/trust/ledger_sim.py).

    python tools/ledger_sim.py [--nodes 1000] [--days 365] [--grant 4M] [--ratio 1]
                               [--capacity 8G] [--daily 16M] [--seed 1] [--json]

Prints, per kind of participant (honest, liar, free rider), what it
stored, what it gave (claims others verified on its node), stored/given,
and the most any one node holds for one of them (a free rider's and a
liar's stays within the grant).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flud.trust.ledger_sim import LedgerSim, SimConfig  # noqa: E402
from flud.units import format_size, parse_size  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--grant", type=parse_size, default=4 << 20)
    parser.add_argument("--ratio", type=float, default=1.0)
    parser.add_argument("--capacity", type=parse_size, default=32 << 30)
    parser.add_argument("--daily", type=parse_size, default=16 << 20)
    parser.add_argument("--free-riders", type=float, default=0.10)
    parser.add_argument("--liars", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = SimConfig(nodes=args.nodes, days=args.days, grant=args.grant, ratio=args.ratio,
                       capacity=args.capacity, daily=args.daily, free_riders=args.free_riders,
                       liars=args.liars, seed=args.seed)
    started = time.monotonic()
    result = LedgerSim(config).run()
    result["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{config.nodes} nodes, {result['days']} days, grant {format_size(config.grant)}, "
          f"ratio {config.ratio:g}, capacity {format_size(config.capacity)}, "
          f"{format_size(config.daily)} a day per owner, k={config.k} n={config.n} "
          f"({result['seconds']} s)")
    print(f"{'kind':>10} {'owners':>6} {'wanted':>10} {'stored':>10} {'given':>10} "
          f"{'stored/given':>12} {'max on 1 node':>13} {'nodes used':>10}")
    for kind, row in result["kinds"].items():
        ratio = "-" if row["stored_over_given"] is None else f"{row['stored_over_given']:.3f}"
        print(f"{kind:>10} {row['owners']:>6} {format_size(row['wanted_per_owner']):>10} "
              f"{format_size(row['stored_per_owner']):>10} {format_size(row['given_per_owner']):>10} "
              f"{ratio:>12} {format_size(row['max_held_on_one_node']):>13} "
              f"{row['nodes_holding_per_owner']:>10}")
    print(f"STOREs refused: {result['refused_quota']} for quota, {result['refused_full']} "
          f"for a full node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
