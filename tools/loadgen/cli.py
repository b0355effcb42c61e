"""check_load's command line: options, the one reactor, exit codes.

Exit 0 when the run happened (failed ops are data), 2 for a usage error,
3 when no node could be reached.
"""
import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import time

from tools.loadgen.spec import SpecError, format_mix, parse_mix, parse_size, parse_size_dist

MAX_DURATION = 3600.0
MAX_OPS = 10 ** 7
MAX_CLIENTS = 64
MAX_SESSIONS = 1024
DEFAULT_DURATION = 10.0
EXIT_NO_NODE = 3

DEFAULT_SWEEP_SESSIONS = "1,16,32,64,128,256"
DEFAULT_SWEEP_SIZES = "100B,1KB,10KB,100KB,1MB,10MB,128MB"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="check_load.py",
        description="Drive a flud testnet with a mix of STORE/RETRIEVE/VERIFY/DELETE from "
                    "several client processes; report throughput, latency, TTFB, errors, and "
                    "the nodes' CPU and memory. Sizes: k=10^3, M=10^6; KiB/MiB are binary.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--testnet", metavar="DIR", help="a testnet directory (flud testnet up --dir DIR)")
    where.add_argument("--nodes", metavar="HOST:PORT,...", help="node addresses")
    p.add_argument("--clients", type=int, default=2, metavar="N",
                   help="client processes, each with its own reactor and identity (default 2)")
    p.add_argument("--sessions", type=int, default=1, metavar="M",
                   help="sessions per client process: op loops with one op in flight each "
                        "(default 1); a process shares one connection per node among them")
    p.add_argument("--mix", default="retrieve=80,store=20",
                   help="op weights, from retrieve, store, verify, delete (default retrieve=80,store=20)")
    p.add_argument("--size", default="exp:10k",
                   help="object sizes: exp:MEAN (exponential), homemix (the 51-file home mix), "
                        "or a fixed size such as 100KB (default exp:10k)")
    p.add_argument("--max-size", metavar="SIZE",
                   help="cap for exponential draws (default 20 x the mean, at least 1 MiB)")
    p.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                   help="pause between one op's end and the next in each session (default 0)")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help=f"measured time (default {DEFAULT_DURATION:g} s, or {MAX_DURATION:g} s when "
                        f"only --ops is given; at most {MAX_DURATION:g})")
    p.add_argument("--ops", type=int, metavar="COUNT",
                   help=f"stop after this many ops in all (at most {MAX_OPS})")
    p.add_argument("--seed", type=int, help="makes op choices, sizes and contents reproducible")
    p.add_argument("--interval", type=float, default=5.0, metavar="N",
                   help="print a table every N seconds (default 5)")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw throughput and latency over time")
    p.add_argument("--warmup-objects", type=int, default=4, metavar="K",
                   help="objects each session stores before the clock starts (default 4)")
    p.add_argument("--op-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="an op not answered by then is cancelled and counted as TIMEOUT")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="do not check retrieved bytes and VERIFY digests")
    p.add_argument("--keep", dest="cleanup", action="store_false",
                   help="leave the stored objects on the nodes (default: delete them at the end)")
    p.add_argument("--workdir", help="where client homes and scratch files go "
                                     "(default: a temporary directory, removed at the end)")
    sweep = p.add_argument_group("sweep", "CORTX-style grid of object size x sessions")
    sweep.add_argument("--sweep", action="store_true",
                       help="for each size and session count: store, then RETRIEVE for a cell; "
                            "report TTFB avg/p99, RPS, throughput and where errors begin")
    sweep.add_argument("--sweep-sessions", default=DEFAULT_SWEEP_SESSIONS,
                       help=f"total sessions per cell, spread over --clients (default {DEFAULT_SWEEP_SESSIONS})")
    sweep.add_argument("--sweep-sizes", default=DEFAULT_SWEEP_SIZES,
                       help=f"object sizes (default {DEFAULT_SWEEP_SIZES})")
    sweep.add_argument("--cell-duration", type=float, default=5.0, metavar="SECONDS",
                       help="measured time per cell (default 5)")
    sweep.add_argument("--cell-ops", type=int, default=100_000, metavar="COUNT",
                       help="op cap per cell (default 100000)")
    sweep.add_argument("--mem-cap", default="2GiB", metavar="SIZE",
                       help="skip a cell when sessions x size exceeds this (default 2GiB)")
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.mix_weights = parse_mix(args.mix)
        args.max_size_bytes = parse_size(args.max_size) if args.max_size else None
        args.size_dist = parse_size_dist(args.size, args.max_size_bytes)
        args.mem_cap_bytes = parse_size(args.mem_cap, limit=1 << 40) if args.sweep else None
        if args.sweep:
            args.sweep_session_list = _int_list(args.sweep_sessions, "--sweep-sessions")
            args.sweep_size_list = [parse_size(s) for s in args.sweep_sizes.split(",") if s.strip()]
            if not args.sweep_size_list:
                raise SpecError("--sweep-sizes lists no size")
    except SpecError as err:
        parser.error(str(err))
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1..{MAX_CLIENTS}")
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions must be 1..{MAX_SESSIONS}")
    if args.duration is None:
        args.duration = MAX_DURATION if args.ops is not None else DEFAULT_DURATION
    if not 0 < args.duration <= MAX_DURATION:
        parser.error(f"--duration must be more than 0 and at most {MAX_DURATION:g} s")
    if args.ops is None:
        args.ops = MAX_OPS
    if not 1 <= args.ops <= MAX_OPS:
        parser.error(f"--ops must be 1..{MAX_OPS}")
    if args.delay < 0 or args.delay > MAX_DURATION:
        parser.error("--delay must be 0..3600 s")
    if args.interval <= 0:
        parser.error("--interval must be more than 0")
    if args.warmup_objects < 0 or args.warmup_objects > 100_000:
        parser.error("--warmup-objects must be 0..100000")
    if args.op_timeout <= 0:
        parser.error("--op-timeout must be more than 0")
    if args.sweep:
        if not 0 < args.cell_duration <= MAX_DURATION:
            parser.error(f"--cell-duration must be more than 0 and at most {MAX_DURATION:g} s")
        if not 1 <= args.cell_ops <= MAX_OPS:
            parser.error(f"--cell-ops must be 1..{MAX_OPS}")
        if any(not 1 <= s <= MAX_SESSIONS * MAX_CLIENTS for s in args.sweep_session_list):
            parser.error("--sweep-sessions: each count must be 1..65536")
    if args.plot and not args.plot.lower().endswith(".png"):
        parser.error("--plot wants a .png file name")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10 ** 9)
    return args


def _int_list(text: str, name: str) -> list:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"{name} wants whole numbers separated by commas") from None
    if not values:
        raise SpecError(f"{name} lists nothing")
    return values


def header(args, node_count: int) -> str:
    total = args.clients * args.sessions
    bounds = f"{args.duration:g} s" + (f" or {args.ops} ops" if args.ops < MAX_OPS else "")
    return (f"check_load: {args.clients} client processes x {args.sessions} sessions "
            f"= {total} sessions, {node_count} nodes, mix {format_mix(args.mix_weights)}, "
            f"size {args.size}, delay {args.delay:g} s, {bounds}, seed {args.seed}")


def config(args, nodes) -> dict:
    return {"clients": args.clients, "sessions_per_client": args.sessions,
            "mix": args.mix_weights, "size": args.size_dist.to_dict(), "delay_s": args.delay,
            "duration_s": args.duration, "ops_cap": args.ops, "seed": args.seed,
            "interval_s": args.interval, "warmup_objects": args.warmup_objects,
            "op_timeout_s": args.op_timeout, "check": args.check, "cleanup": args.cleanup,
            "nodes": [{"node_id": n.node_id.hex(), "host": n.host, "port": n.port} for n in nodes]}


def main(argv=None) -> int:
    args = parse_args(argv)
    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix="check_load-") if own_workdir else os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    from flud.cli.runner import run_reactor
    from tools.loadgen.nodes import NoReachableNode
    try:
        return run_reactor(lambda reactor: _run(reactor, args, workdir))
    except NoReachableNode as err:
        print(f"check_load: {err}", file=sys.stderr)
        return EXIT_NO_NODE
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _install_interrupt(reactor, state: dict) -> None:
    def handler(signum, frame):
        if state.get("interrupted"):
            for run in state.get("runs", []):
                for child in run.children:
                    try:
                        os.killpg(child.pid, signal.SIGKILL)
                    except OSError:
                        pass
            os._exit(130)
        state["interrupted"] = True
        print("\ninterrupted: stopping the clients (Ctrl-C again to kill them)", file=sys.stderr)
        run = state.get("current")
        if run is not None:
            reactor.callFromThread(run.interrupt)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _run(reactor, args, workdir):
    from twisted.internet import defer

    from tools.loadgen.nodes import NodeProbe, NoReachableNode, from_testnet, parse_addresses

    @defer.inlineCallbacks
    def go():
        probe = NodeProbe(reactor, os.path.join(workdir, "parent-home"))
        state = {"runs": []}
        _install_interrupt(reactor, state)
        try:
            if args.testnet:
                nodes = from_testnet(os.path.abspath(args.testnet))
            else:
                try:
                    addresses = parse_addresses(args.nodes)
                except ValueError as err:
                    print(f"check_load: {err}", file=sys.stderr)
                    return 2
                nodes = yield probe.resolve(addresses)
                if not nodes:
                    raise NoReachableNode(f"no node answered at {args.nodes}")
            stats = yield probe.sample(nodes)
            alive = [n for n, s in zip(nodes, stats) if s is not None]
            if not alive:
                raise NoReachableNode(f"none of the {len(nodes)} nodes answered STATS")
            if len(alive) < len(nodes):
                print(f"note: {len(nodes) - len(alive)} of {len(nodes)} nodes did not answer; "
                      f"using the {len(alive)} that did")
            if args.sweep:
                from tools.loadgen.sweep import run_sweep
                code = yield run_sweep(reactor, args, alive, probe, workdir, state)
            else:
                code = yield _single(reactor, args, alive, probe, workdir, state)
            return code
        finally:
            probe.close()

    return go()


def _single(reactor, args, nodes, probe, workdir, state):
    from twisted.internet import defer

    from tools.loadgen import report
    from tools.loadgen.runner import LoadRun, Plan

    @defer.inlineCallbacks
    def go():
        head = header(args, len(nodes))
        print(head, flush=True)
        printer = report.IntervalPrinter(lambda line: print(line, flush=True))
        plan = Plan(nodes=nodes, sessions=[args.sessions] * args.clients, mix=args.mix_weights,
                    size=args.size, max_size=args.max_size_bytes, delay=args.delay,
                    duration=args.duration, ops=args.ops, seed=args.seed, interval=args.interval,
                    warmup_objects=args.warmup_objects, op_timeout=args.op_timeout,
                    check=args.check, cleanup=args.cleanup, workdir=workdir, label="run",
                    on_interval=printer)
        run = LoadRun(reactor, plan, probe)
        state["current"] = run
        state["runs"].append(run)
        started = time.time()
        result = yield run.run()
        print()
        print(report.run_text(result, "final figures over the measured window "
                                      f"({result['elapsed_s']:.2f} s)"), flush=True)
        doc = {"tool": "check_load", "version": 1, "started": started, "argv": sys.argv[1:],
               "config": config(args, nodes), **result}
        if args.json:
            report.write_json(args.json, doc)
            print(f"\nJSON written to {args.json}")
        if args.plot:
            from tools.loadgen.plot import plot_run
            if plot_run(doc, args.plot):
                print(f"plot written to {args.plot}")
        return 0

    return go()
