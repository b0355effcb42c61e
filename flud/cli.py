"""The `flud` command. Subcommands import what they need, when they run,
so a node process pays only for the node's own modules."""
import argparse
import sys

GIB = 1024 ** 3


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024 ** 2, "g": GIB, "t": 1024 * GIB}
    text = text.strip().lower().rstrip("b").rstrip("i")
    factor = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    return int(float(number) * factor)


def _add_node(sub) -> None:
    node = sub.add_parser("node", help="run a storage node").add_subparsers(dest="action", required=True)
    run = node.add_parser("run", help="run one node in the foreground")
    run.add_argument("--home", required=True, help="the node's directory (created if missing)")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=0, help="port (default: chosen by the OS)")
    run.add_argument("--join", metavar="HOST:PORT", help="any running node to join through")
    run.add_argument("--capacity", type=_size, default=10 * GIB, help="space to offer, e.g. 500M, 10G")
    run.add_argument("--memory-log", metavar="FILE", help="write memory samples as CSV")
    run.add_argument("--memory-budget", type=_size, default=None, metavar="SIZE",
                     help="bytes of transfer buffers held at once, e.g. 64M (default 64 MiB)")
    run.add_argument("-v", "--verbose", action="store_true")


def _add_testnet(sub) -> None:
    testnet = sub.add_parser("testnet", help="a local testnet of node processes").add_subparsers(
        dest="action", required=True)
    up = testnet.add_parser("up", help="start nodes on 127.0.0.1 and wait until they know each other")
    up.add_argument("--nodes", type=int, default=50)
    up.add_argument("--dir", required=True)
    up.add_argument("--base-port", type=int, default=0, help="node i listens on BASE+i (default: OS-chosen)")
    up.add_argument("--capacity", default="10G")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the nodes")
    up.add_argument("--memory-log", action="store_true", help="each node writes memory.csv in its home")
    up.add_argument("--spawn", choices=("fork", "exec"), default="fork",
                    help="fork nodes from the launcher (fast) or exec a fresh interpreter each")
    for name, text in (("status", "one row per node"), ("down", "stop the testnet's processes")):
        p = testnet.add_parser(name, help=text)
        p.add_argument("--dir", required=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flud", description="peer-to-peer backup")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_node(sub)
    _add_testnet(sub)
    try:
        from flud.client.commands import add_client_commands
    except ImportError:
        add_client_commands = None
    if add_client_commands is not None:
        add_client_commands(sub)
    return parser


def main(argv=None) -> int:
    from flud.lean import defer_unused_imports, reexec_lean_node, tune_malloc
    if argv is None and sys.argv[1:3] == ["node", "run"]:
        reexec_lean_node(sys.argv[1:])
    defer_unused_imports()
    tune_malloc()
    args = build_parser().parse_args(argv)
    try:
        if args.command == "node":
            from flud.node.run import run
            return run(args)
        if args.command == "testnet":
            from flud import testnet
            return testnet.main(args)
        return args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()


# What a command returns when whoever read its output stopped reading (as in
# `flud ls | head`): the shell's code for a death by SIGPIPE, without a trace.
EXIT_BROKEN_PIPE = 128 + 13


def _reader_went_away() -> int:
    import os
    # Python flushes stdout once more at exit; into /dev/null that cannot fail.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
