"""`flud node run`: its arguments, made into a NodeConfig, and the node
process run on it."""
from flud.node.config import (DAY, DEFAULT_CAPACITY, DEFAULT_GRANT, MIN_LEASE, MIN_TRASH,
                              NodeConfig)

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


def grant_arg(text: str):
    """A grant: a size, or 'unlimited' (no quota at all)."""
    if text.strip().lower() in ("unlimited", "none"):
        return None
    return _size(text)


def owner_quota_arg(text: str):
    """'OWNER_ID_HEX=SIZE' -> (owner id bytes, bytes)."""
    import argparse
    owner, sep, size = text.partition("=")
    try:
        owner_id = bytes.fromhex(owner.strip())
    except ValueError:
        owner_id = b""
    if not sep or len(owner_id) != 32:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not OWNER=SIZE with OWNER a 64-hex-digit owner id")
    return owner_id, _size(size)


def add_quota_arguments(parser, grant_default) -> None:
    """--grant and the give-to-get knobs (docs/quotas.md)."""
    parser.add_argument("--grant", type=grant_arg, default=grant_default, metavar="SIZE",
                        help="bytes every owner may store here for nothing; more needs credit "
                             "from a linked node ('unlimited': no quota; default "
                             + ("none" if grant_default is None else f"{grant_default >> 30}G")
                             + ")")
    parser.add_argument("--give-ratio", type=float, default=NodeConfig.give_ratio, metavar="R",
                        help="bytes of credit per byte an owner's linked nodes were seen to "
                             "hold for this node (default 1)")
    parser.add_argument("--owner-quota", type=owner_quota_arg, action="append", default=[],
                        metavar="OWNER=SIZE",
                        help="an explicit quota for one owner (a friend), overriding the "
                             "formula; repeat for more")
    parser.add_argument("--ledger-interval", type=_duration, default=NodeConfig.ledger_interval,
                        metavar="DURATION", help="seconds between ledger rounds: links pushed, "
                                                 "claims placed and checked (default 10min)")


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
    add_quota_arguments(run, DEFAULT_GRANT)
    run.add_argument("--claim-allowance", type=_size, default=NodeConfig.claim_allowance,
                     metavar="SIZE", help="bytes of claims one other node may keep here "
                                          "(default 4G)")
    run.add_argument("--no-relay", dest="relay", action="store_false",
                     help="relay for no NATed node (by default a reachable node holds up to "
                          "128 bounded relay reservations; docs/reachability.md)")
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
                      lease_sweep_interval=args.lease_sweep_interval,
                      grant=args.grant, give_ratio=args.give_ratio,
                      owner_quotas=tuple(args.owner_quota),
                      claim_allowance=args.claim_allowance,
                      ledger_interval=args.ledger_interval,
                      relay=args.relay)


def cmd_node_run(args) -> int:
    from flud.node import process   # here: every command builds this parser
    return process.run(node_config(args))
