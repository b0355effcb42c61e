"""The `flud` command: the parser and the dispatch. Subcommands import what
they need when they run, so a node process pays only for the node's own
modules."""
import argparse
import sys

from flud.cli.exits import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    # Imported here, not above: main() first installs flud.lean's import
    # hook, and the subcommands' modules must load under it (the node's
    # configuration brings dataclasses, and with it inspect and tokenize).
    from flud.cli.node import add_node_commands
    from flud.cli.testnet import add_testnet_commands
    from flud.cli.lab import add_lab_commands

    parser = argparse.ArgumentParser(prog="flud", description="peer-to-peer backup")
    sub = parser.add_subparsers(dest="command", required=True)
    add_node_commands(sub)
    add_testnet_commands(sub)
    from flud.cli.link import add_link_command
    add_link_command(sub)
    add_lab_commands(sub)
    try:
        from flud.cli.client import add_client_commands
    except ImportError:
        add_client_commands = None
    if add_client_commands is not None:
        add_client_commands(sub)
        from flud.cli.agent import add_agent_command
        from flud.cli.mount import add_mount_command
        from flud.cli.friends import add_friends_command
        add_agent_command(sub)
        add_mount_command(sub)
        add_friends_command(sub)
    from flud.cli.completion import add_completion_command
    add_completion_command(sub, parser)
    return parser


def main(argv=None) -> int:
    from flud.lean import defer_unused_imports, reexec_lean_node, tune_malloc
    if argv is None and sys.argv[1:3] == ["node", "run"]:
        reexec_lean_node(sys.argv[1:])
    defer_unused_imports()
    tune_malloc()
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_went_away()


def _reader_went_away() -> int:
    import os
    # Python flushes stdout once more at exit; into /dev/null that cannot fail.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
