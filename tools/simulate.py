"""`make simulate SEEDS=N [FROM=S] [FAULTS=kinds] [STEPS=M | DAYS=D]`: run N simulated
lifecycle histories (tests/sim/), seeds S .. S+N-1, and print how many ran,
the simulated days they covered, the violations, and each failing seed's
history and replay command. Exit 1 if any history violated an invariant.

FAULTS: a comma list of fault kinds (tests/sim/history.py FAULT_KINDS),
"all", or "none"; default: FLUD_SIM_FAULTS, else the kinds the pytest run
has on (DEFAULT_FAULTS)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.sim.history import FAULT_KINDS, faults_from_env, parse_faults, run_history  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100, help="how many histories")
    parser.add_argument("--from", dest="start", type=int, default=1, help="the first seed")
    parser.add_argument("--faults", default=None,
                        help="comma list of " + ", ".join(sorted(FAULT_KINDS)) +
                             ", 'all' or 'none'")
    parser.add_argument("--steps", type=int, default=60, help="steps per history")
    parser.add_argument("--days", type=float, default=None,
                        help="simulated days per history instead of a number of steps")
    parser.add_argument("--quiet", action="store_true", help="no line per history")
    parser.add_argument("--stop", action="store_true", help="stop at the first violation")
    parser.add_argument("--profile", metavar="FILE", default=None,
                        help="write cProfile statistics of the run to FILE (pstats format)")
    args = parser.parse_args(argv)
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        try:
            return profiler.runcall(_run, args)
        finally:
            profiler.dump_stats(args.profile)
    return _run(args)


def _run(args) -> int:
    faults = parse_faults(args.faults) if args.faults else faults_from_env()
    length = f"{args.days:g} days" if args.days else f"{args.steps} steps"
    print(f"simulate: seeds {args.start}..{args.start + args.seeds - 1}, {length} each, "
          f"faults: {','.join(sorted(faults)) or 'none'}", flush=True)
    started = time.monotonic()
    runs, days, failed = 0, 0.0, []
    for seed in range(args.start, args.start + args.seeds):
        t0 = time.monotonic()
        outcome = run_history(seed, faults, args.steps, days=args.days)
        runs += 1
        days += outcome.sim_days
        if not args.quiet:
            status = (outcome.violation or "ok").splitlines()[0][:150]
            print(f"  seed {seed}: {outcome.sim_days:6.1f} days, {outcome.steps} steps, "
                  f"{time.monotonic() - t0:5.1f} s: {status}", flush=True)
        if outcome.violation:
            failed.append(outcome)
            if args.stop:
                break
    elapsed = time.monotonic() - started
    print(f"\nhistories run: {runs}; simulated days: {days:.1f}; violations: {len(failed)}; "
          f"{elapsed:.1f} s ({elapsed / max(runs, 1):.2f} s a history)")
    for outcome in failed:
        print("\n" + outcome.report())
    if failed:
        print("\nreplay each failing seed with:")
        for outcome in failed:
            print(f"  {outcome.replay_command()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
