"""Run the overlay (Kademlia) simulation and print its figures against the
targets of issue 30: every live record found, hops, and lookups a hostile
population could misdirect (target 0 with the diversity cap and signatures).

    .venv/bin/python tools/dht_sim.py [--nodes 10000] [--hostile 0.1]
        [--churn 0.2] [--hours 24] [--lookups 200] [--seed 1] [--no-diversity]
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flud.overlay.simulation import run_simulation  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--hostile", type=float, default=0.10)
    p.add_argument("--churn", type=float, default=0.20, help="share of nodes replaced a day")
    p.add_argument("--hours", type=int, default=24)
    p.add_argument("--lookups", type=int, default=200, help="lookups an hour")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-diversity", action="store_true")
    p.add_argument("--single-path", action="store_true",
                   help="plain Kademlia lookups (no S/Kademlia disjoint paths)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    started = time.monotonic()
    say = (lambda m: None) if args.json else (lambda m: print(f"  {time.monotonic() - started:6.1f} s  {m}", flush=True))
    figures = run_simulation(args.nodes, args.hostile, args.churn, args.hours, args.lookups,
                             seed=args.seed, diversity=not args.no_diversity,
                             disjoint=not args.single_path, progress=say)
    figures["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(figures))
    else:
        live = figures["lookups"]
        print(f"nodes {figures['nodes']} ({figures['hostile']:.0%} hostile), churn "
              f"{figures['churn_per_day']:.0%}/day over {figures['hours']} h, seed {figures['seed']}, "
              f"diversity cap {'on' if figures['diversity'] else 'off'}, "
              f"{'disjoint paths' if figures['disjoint'] else 'single path'}")
        print(f"live records found: {figures['found']}/{live} (target: all)")
        print(f"hops: median {figures['hops_median']}, p99 {figures['hops_p99']}; "
              f"queries a lookup: median {figures['queries_median']}")
        print(f"eclipse victim found: {figures['eclipse_found']}/{figures['eclipse_lookups']}")
        print(f"misdirected lookups: {figures['misdirected']} (target 0)")
        print(f"{figures['seconds']} s")
    return 0 if figures["misdirected"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
