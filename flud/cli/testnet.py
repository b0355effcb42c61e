"""`flud testnet up|status|down`: N node processes on 127.0.0.1.

`up` starts the first node, then all the others joining through it, waits for
every node's readiness file (node.json), then asks each node over the wire
until every one knows every other. Any failure stops everything it started.
A directory that already ran a testnet keeps its nodes' homes, so `up` after
`down` brings back the same nodes with their data.

The harness (flud/testnet/) is imported by each command when it runs: every
`flud` process builds this parser, a node too, and a node must not load the
launcher's modules (subprocess among them).
"""
import os
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_NOT_DONE, EXIT_OK
from flud.cli.node import _size


def add_testnet_commands(sub) -> None:
    testnet = sub.add_parser("testnet", help="a local testnet of node processes").add_subparsers(
        dest="action", required=True)
    up = testnet.add_parser("up", help="start nodes on 127.0.0.1 and wait until they know each other")
    up.add_argument("--nodes", type=int, default=50)
    up.add_argument("--dir", required=True)
    up.add_argument("--base-port", type=int, default=0, help="node i listens on BASE+i (default: OS-chosen)")
    up.add_argument("--capacity", type=_size, default="10G")
    from flud.cli.node import add_quota_arguments
    # A testnet has no quota unless --grant says one (docs/quotas.md).
    add_quota_arguments(up, None)
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the nodes")
    up.add_argument("--memory-log", action="store_true", help="each node writes memory.csv in its home")
    up.add_argument("--spawn", choices=("fork", "exec"), default="fork",
                    help="fork nodes from the launcher (fast) or exec a fresh interpreter each")
    up.add_argument("--json", action="store_true",
                    help="end with one JSON summary line on stdout (seconds, nodes); the "
                         "messages go to stderr")
    up.set_defaults(handler=cmd_up)
    for name, text, handler in (("status", "one row per node", cmd_status),
                                ("down", "stop the testnet's processes", cmd_down)):
        p = testnet.add_parser(name, help=text)
        p.add_argument("--dir", required=True)
        p.set_defaults(handler=handler)


def quota_options(args) -> dict:
    """The NodeConfig fields `testnet up`'s give-to-get flags set."""
    return {"grant": args.grant, "give_ratio": args.give_ratio,
            "owner_quotas": tuple(args.owner_quota), "ledger_interval": args.ledger_interval}


def cmd_up(args) -> int:
    """Start the testnet; with --json, the text goes to stderr and the last
    line on stdout is the summary (docs/json.md): nodes, seconds (until every
    node joined), processes_seconds (until every process was ready)."""
    if not getattr(args, "json", False):
        return _up(args, None)
    import contextlib
    from flud.cli.jsonlines import summary_line

    summary = {}
    with contextlib.redirect_stdout(sys.stderr):
        code = _up(args, summary)
    print(summary_line("testnet up", {"exit": code, "nodes": args.nodes, **summary}))
    return code


def _up(args, summary) -> int:
    from flud.testnet.launch import LaunchError, Testnet, testnet_file

    directory = os.path.abspath(args.dir)
    net = Testnet(directory)
    alive = net.alive()
    if alive:
        print(f"a testnet is already running in {directory} ({len(alive)} nodes alive); "
              f"use `flud testnet status --dir {args.dir}` or `flud testnet down --dir {args.dir}`")
        return EXIT_NOT_DONE
    if args.nodes < 1:
        print("--nodes must be at least 1")
        return EXIT_ERROR
    started = time.monotonic()
    deadline = started + args.timeout
    try:
        forked = args.spawn == "fork"
        if forked:          # they say when they joined (flud/testnet/crowd.py)
            from flud.testnet import crowd
            nodes = crowd.start(net, args.nodes, args.capacity, memory_log=args.memory_log,
                                base_port=args.base_port, deadline=deadline,
                                options=quota_options(args))
        else:
            nodes = net.start(args.nodes, args.capacity, memory_log=args.memory_log,
                              base_port=args.base_port, fork=False, deadline=deadline,
                              options=quota_options(args))
        if forked:
            processes_ready = net.listening_seconds
            print(f"{args.nodes} node processes ready in {processes_ready:.2f} s")
        else:
            processes_ready = time.monotonic() - started
            print(f"{args.nodes} node processes ready in {processes_ready:.2f} s; "
                  f"waiting for each to join...")
            # Imported once the nodes are forked, so that they do not inherit
            # the client's modules the query brings.
            from flud.cli.runner import run_reactor
            from flud.testnet.query import wait_converged
            run_reactor(lambda reactor: wait_converged(reactor, directory, nodes, deadline))
    except (LaunchError, KeyboardInterrupt) as err:
        print(f"testnet did not start: {err}", file=sys.stderr)
        net.abort()
        return EXIT_NOT_DONE
    total = time.monotonic() - started
    if summary is not None:
        summary.update(seconds=round(total, 3), processes_seconds=round(processes_ready, 3))
    print(f"testnet up: {args.nodes} nodes on 127.0.0.1, every node joined the DHT, "
          f"in {total:.2f} s (processes {processes_ready:.2f} s). Details: {testnet_file(directory)}")
    return EXIT_OK


def cmd_down(args) -> int:
    from flud.testnet.launch import Testnet

    net = Testnet(args.dir)
    nodes = net.nodes
    if not nodes:
        print(f"no testnet in {net.directory}")
        return EXIT_NOT_DONE
    stopped = net.stop()
    print(f"stopped {stopped} node process(es) of {len(nodes)} in {net.directory}")
    return EXIT_OK


def cmd_status(args) -> int:
    from flud.cli.runner import run_reactor
    from flud.testnet.launch import load
    from flud.testnet.query import collect_stats

    directory = os.path.abspath(args.dir)
    nodes = load(directory)["nodes"]
    if not nodes:
        print(f"no testnet in {directory}")
        return EXIT_NOT_DONE
    rows = run_reactor(lambda reactor: collect_stats(reactor, directory, nodes))
    print(f"{'#':>3} {'node':12} {'port':>5} {'pid':>7} {'alive':5} {'peers':>5} "
          f"{'shares':>7} {'members':>7} {'stored':>10} {'free':>10} {'garbage':>9} "
          f"{'trash':>9} {'rss':>8} {'peak rss':>8} "
          f"{'xfers':>5} {'buffered':>8} {'cpu s':>6}")
    alive = 0
    for i, (node, stats) in enumerate(rows):
        if stats is None:
            print(f"{i:>3} {node['node_id'][:12]} {node['port']:>5} {node['pid']:>7} {'no':5}")
            continue
        alive += 1
        store, memory = stats["store"], stats["memory"]
        print(f"{i:>3} {node['node_id'][:12]} {node['port']:>5} {node['pid']:>7} {'yes':5} "
              f"{stats['peers_known']:>5} {store['shares']:>7} {store['members']:>7} "
              f"{_mb(store['bytes_stored']):>10} {_mb(store['free']):>10} "
              f"{_mb(store.get('garbage_bytes', 0)):>9} {_mb(store.get('trashed_bytes', 0)):>9} "
              f"{_mb(memory['rss']):>8} "
              f"{_mb(memory['peak_rss']):>8} {memory['active_transfers']:>5} "
              f"{_mb(memory['buffered_bytes']):>8} {stats['cpu_seconds']:>6.1f}")
    print(f"{alive} of {len(nodes)} nodes alive")
    return EXIT_OK if alive == len(nodes) else EXIT_NOT_DONE


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
