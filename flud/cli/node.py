"""`flud node run`: its arguments, made into a NodeConfig, and the node
process run on it."""
from flud.node import process
from flud.node.config import DAY, DEFAULT_CAPACITY, MIN_LEASE, MIN_TRASH, NodeConfig

def _size(text: str) -> int:
    """A size in flud's grammar (flud/units.py): '500M', '10G', '64MiB', or
    bytes."""
    from flud.cli.arguments import size_arg
    return size_arg("b")(text)


def _duration(text: str) -> float:
    """A duration in flud's grammar: '90d', '12h', '30min', '5s', or plain
    seconds."""
    from flud.cli.arguments import seconds_arg
    return seconds_arg("s")(text)


def _at_least(minimum: float, why: str):
    """A _duration of at least `minimum` seconds (argparse prints `why` below that)."""
    import argparse

    def parse(text: str) -> float:
        seconds = _duration(text)
        if seconds < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is less than {minimum / DAY:g} days: {why}")
        return seconds
    parse.__name__ = "_duration"  # what argparse names in "invalid ... value"
    return parse


def parse_address(text: str):
    """'HOST:PORT' -> (host, port); ':PORT' means 127.0.0.1."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


def add_node_commands(sub) -> None:
    node = sub.add_parser("node", help="run a storage node").add_subparsers(dest="action", required=True)
    run = node.add_parser("run", help="run one node in the foreground")
    run.add_argument("--home", required=True, help="the node's directory (created if missing)")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=0, help="port (default: chosen by the OS)")
    run.add_argument("--join", metavar="HOST:PORT", action="append",
                     help="any running node to join through (again for more: the DHT "
                          "asks each; the nodes found are kept in the home for the next start)")
    run.add_argument("--capacity", type=_size, default=DEFAULT_CAPACITY,
                     help="space to offer, e.g. 500M, 10G")
    run.add_argument("--memory-log", metavar="FILE", help="write memory samples as CSV")
    run.add_argument("--memory-budget", type=_size, default=None, metavar="SIZE",
                     help="bytes of transfer buffers held at once, e.g. 64M (default 64 MiB)")
    run.add_argument("--lease", default=NodeConfig.lease_seconds, metavar="DURATION",
                     type=_at_least(MIN_LEASE, "clients renew once a week, and a lease must "
                                               "outlast two renewals"),
                     help="an owner not seen this long has its data moved to the trash, "
                          "e.g. 180d (default 365d; at least 14d)")
    run.add_argument("--trash-time", default=NodeConfig.trash_seconds, metavar="DURATION",
                     type=_at_least(MIN_TRASH, "the trash must outlast two of the clients' "
                                               "weekly renewals"),
                     help="data stays in the trash this long before it is deleted "
                          "(default 30d; at least 14d)")
    run.add_argument("--lease-sweep-interval", type=_duration, default=3600.0, metavar="DURATION",
                     help="how often leases are checked (default 1h)")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(handler=cmd_node_run)


def node_config(args) -> NodeConfig:
    """The NodeConfig that `flud node run`'s parsed arguments ask for."""
    return NodeConfig(home=args.home, host=args.host, port=args.port,
                      join=parse_address(args.join[0]) if args.join else None,
                      also_join=tuple(parse_address(a) for a in (args.join or [])[1:]),
                      capacity=args.capacity, memory_log=args.memory_log,
                      memory_budget=args.memory_budget, verbose=args.verbose,
                      lease_seconds=args.lease, trash_seconds=args.trash_time,
                      lease_sweep_interval=args.lease_sweep_interval)


def cmd_node_run(args) -> int:
    return process.run(node_config(args))
