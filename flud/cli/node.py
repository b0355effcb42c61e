"""`flud node run`: its arguments, made into a NodeConfig, and the node
process run on it."""
from flud.node import process
from flud.node.config import DAY, DEFAULT_CAPACITY, MIN_LEASE, MIN_TRASH, NodeConfig

GIB = 1024 ** 3


def _size(text: str) -> int:
    """'500M', '10G', '64MiB' -> bytes. (argparse names this function in its
    error message: "invalid _size value".)"""
    units = {"k": 1024, "m": 1024 ** 2, "g": GIB, "t": 1024 * GIB}
    text = text.strip().lower().rstrip("b").rstrip("i")
    factor = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    return int(float(number) * factor)


def _duration(text: str) -> float:
    """'90d', '12h', '30m', '5s' or plain seconds -> seconds. (argparse names
    this function in its error message: "invalid _duration value".)"""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    text = text.strip().lower()
    factor = units.get(text[-1:], 1)
    number = float(text[:-1] if text[-1:] in units else text)
    if number < 0:
        raise ValueError(f"{text!r} is negative")
    return number * factor


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
    run.add_argument("--join", metavar="HOST:PORT", help="any running node to join through")
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
                      join=parse_address(args.join) if args.join else None,
                      capacity=args.capacity, memory_log=args.memory_log,
                      memory_budget=args.memory_budget, verbose=args.verbose,
                      lease_seconds=args.lease, trash_seconds=args.trash_time,
                      lease_sweep_interval=args.lease_sweep_interval)


def cmd_node_run(args) -> int:
    return process.run(node_config(args))
