"""Client subcommands: init, key, backup, ls, restore, verify. Each imports
the client's modules when it runs: building the parser (which every `flud`
process does, a node too) loads none of them."""
import getpass
import os
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_OK
from flud.cli.home import open_home
from flud.cli.node import parse_address
from flud.errors import FludError


class NoPassphrase(FludError):
    """No FLUD_PASSPHRASE and no terminal to ask on."""

    code = "NO_PASSPHRASE"


def add_client_commands(sub) -> None:
    init = sub.add_parser("init", help="create a client home")
    init.add_argument("--home", required=True)
    where = init.add_mutually_exclusive_group(required=True)
    where.add_argument("--testnet", metavar="DIR", help="a local testnet directory")
    where.add_argument("--join", metavar="HOST:PORT", help="any node of the network")
    init.add_argument("--import-key", metavar="FILE", help="a key exported with `flud key export`")
    init.add_argument("--k", type=int, help="shares needed to restore (default 4)")
    init.add_argument("--n", type=int, help="shares stored per segment (default 8)")
    init.add_argument("--segment-size", type=int, help="bytes per segment (default 2 MiB)")
    init.set_defaults(handler=cmd_init)

    key = sub.add_parser("key", help="export the key for safekeeping").add_subparsers(
        dest="action", required=True)
    export = key.add_parser("export", help="write the key, protected by a passphrase")
    export.add_argument("--home", required=True)
    export.add_argument("file")
    export.add_argument("--force", action="store_true", help="replace FILE if it exists")
    export.set_defaults(handler=cmd_key_export)

    backup = sub.add_parser("backup", help="back up directories")
    backup.add_argument("paths", nargs="+")
    backup.add_argument("--home", required=True)
    backup.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    backup.add_argument("--memory-log", metavar="FILE")
    backup.add_argument("--memory-budget", type=_mib, metavar="MIB",
                        help="MiB of transfer buffers held at once (default 64)")
    backup.add_argument("--parallel-files", type=_positive, default=None, metavar="N",
                        help="large files uploaded at once (default 3)")
    _job_flags(backup)
    backup.set_defaults(handler=cmd_backup)

    ls = sub.add_parser("ls", help="list snapshots, or the files of one")
    ls.add_argument("path", nargs="?")
    ls.add_argument("--home", required=True)
    ls.add_argument("--snapshot", type=int)
    ls.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ls.set_defaults(handler=cmd_ls)

    restore = sub.add_parser("restore", help="restore a snapshot")
    restore.add_argument("paths", nargs="*", help="parts of the snapshot (default: all)")
    restore.add_argument("--home", required=True)
    restore.add_argument("--to", required=True, metavar="DEST")
    restore.add_argument("--snapshot", type=int)
    restore.add_argument("--memory-log", metavar="FILE")
    restore.add_argument("--memory-budget", type=_mib, metavar="MIB",
                         help="MiB of transfer buffers held at once (default 64)")
    _job_flags(restore)
    restore.set_defaults(handler=cmd_restore)

    verify = sub.add_parser("verify", help="challenge the nodes holding your shares")
    verify.add_argument("--home", required=True)
    verify.add_argument("--sample", type=float, default=1.0, metavar="FRACTION")
    verify.add_argument("--snapshot", type=int)
    verify.add_argument("--full", action="store_true",
                        help="challenge every byte of every share (runs otherwise alternate "
                             "between that and a spot check of one 64 KiB span)")
    _job_flags(verify)
    verify.set_defaults(handler=cmd_verify)


def _job_flags(parser) -> None:
    """What every client job takes: its summary as JSON, and rate limits."""
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout "
                             "(progress and messages go to stderr)")
    parser.add_argument("--limit-upload", type=_rate, default=0, metavar="RATE",
                        help="upload at most RATE: KiB/s, or 500K, 10M (default: no limit)")
    parser.add_argument("--limit-download", type=_rate, default=0, metavar="RATE",
                        help="download at most RATE: KiB/s, or 500K, 10M (default: no limit)")


def _rate(text: str) -> int:
    import argparse
    from flud.agent.config import parse_rate
    try:
        return parse_rate(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err))


def _positive(text: str) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _mib(text: str) -> int:
    return _positive(text) * 1024 * 1024


def _passphrase(prompt: str) -> str:
    env = os.environ.get("FLUD_PASSPHRASE")
    if env is not None:
        return env
    if not sys.stdin.isatty():
        # An error like any other (exit 2), not SystemExit's bare exit 1.
        raise NoPassphrase("no passphrase: set FLUD_PASSPHRASE, or run this in a terminal "
                           "to be asked for one")
    return getpass.getpass(prompt)


def cmd_init(args) -> int:
    from flud.client.home import HomeError, create_home
    from flud.errors import FludError
    from flud.keys import import_secret_bundle

    identity = secret = None
    if args.import_key:
        try:
            with open(args.import_key, "rb") as f:
                blob = f.read()
            identity, secret = import_secret_bundle(blob, _passphrase("passphrase: "))
        except FileNotFoundError:
            print(f"error: no key file at {args.import_key}", file=sys.stderr)
            return EXIT_ERROR
        except FludError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_ERROR
    overrides = {k: v for k, v in (("k", args.k), ("n", args.n),
                                   ("segment_size", args.segment_size)) if v}
    if overrides.get("k", 4) > overrides.get("n", 8):
        print("error: k must not exceed n", file=sys.stderr)
        return EXIT_ERROR
    try:
        join = parse_address(args.join) if args.join else None
        home = create_home(args.home, testnet=args.testnet, join=join, identity=identity,
                           secret=secret, overrides=overrides)
    except (HomeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    from flud.agent.config import write_default
    from flud.agent.config import config_path
    try:
        agent_config = write_default(home.path)
    except FileExistsError:  # the user's own, kept
        agent_config = config_path(home.path)
    print(f"client home {home.path} ready: client id {home.identity.node_id_hex[:16]}, "
          f"k={home.config['k']} n={home.config['n']}")
    print(f"the agent's settings (paths, schedules, limits): {agent_config}")
    if not args.import_key:
        print(f"keep a copy of your key: flud key export --home {args.home} FILE")
    return EXIT_OK


def cmd_key_export(args) -> int:
    from flud.client.home import ClientHome, HomeError
    from flud.keys import export_secret_bundle, write_private_file

    try:
        home = ClientHome(args.home)
    except HomeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    exists = (f"error: {args.file} already exists; choose another file, or add --force "
              f"to replace it")
    if os.path.lexists(args.file) and not args.force:  # before asking for the passphrase
        print(exists, file=sys.stderr)
        return EXIT_ERROR
    try:
        passphrase = _passphrase("passphrase to protect the key: ")
    except NoPassphrase as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if len(passphrase) < 8:
        print("error: use a passphrase of at least 8 characters", file=sys.stderr)
        return EXIT_ERROR
    bundle = export_secret_bundle(home.identity, home.secret, passphrase)
    try:
        write_private_file(args.file, bundle, replace=args.force)
    except FileExistsError:  # made since the check above
        print(exists, file=sys.stderr)
        return EXIT_ERROR
    print(f"key written to {args.file} (mode 0600); restore with "
          f"`flud init --home NEW --import-key {args.file} --join HOST:PORT`")
    return EXIT_OK


def cmd_ls(args) -> int:
    home = open_home(args.home)
    if home is None:
        return EXIT_ERROR
    try:
        return _list(home, args)
    finally:
        home.close()


def _list(home, args) -> int:
    snapshots = home.index.snapshots()
    if getattr(args, "json", False):
        return _list_json(home, args, snapshots)
    if args.snapshot is None and not args.path:
        if not snapshots:
            print("no snapshots in the local index (after a total loss, `flud restore` "
                  "fetches the manifest from the network)")
        for s in snapshots:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["created"]))
            print(f"snapshot {s['id']:>4}  {when}  {s['files']:>7} files  {s['bytes']:>14} bytes")
        return EXIT_OK
    if not snapshots:
        print("no snapshots yet", file=sys.stderr)
        return EXIT_ERROR
    sid = args.snapshot or snapshots[-1]["id"]
    manifest = home.index.manifest(sid)
    if manifest is None:
        print(f"error: no snapshot {sid}", file=sys.stderr)
        return EXIT_ERROR
    from flud.client.manifest import snapshot_paths

    prefix = snapshot_paths(manifest.get("roots", ()), [args.path])[0].strip("/") \
        if args.path else ""
    for rel, kind, mode, mtime_ns, size, last in manifest["entries"]:
        if prefix and not (rel == prefix or rel.startswith(prefix + "/")):
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime_ns / 1e9))
        extra = f" -> {last}" if kind == "symlink" else ""
        print(f"{kind[0]} {mode:04o} {size:>12} {when} {rel}{extra}")
    return EXIT_OK


def _list_json(home, args, snapshots) -> int:
    """`flud ls --json`: the snapshots, or one snapshot's entries, as one object."""
    import json
    if args.snapshot is None and not args.path:
        print(json.dumps({"command": "ls", "snapshots": [
            {"id": s["id"], "created": s["created"], "files": s["files"], "bytes": s["bytes"]}
            for s in snapshots]}))
        return EXIT_OK
    sid = args.snapshot or (snapshots[-1]["id"] if snapshots else None)
    manifest = home.index.manifest(sid) if sid is not None else None
    if manifest is None:
        print(json.dumps({"command": "ls", "error": {"code": "NO_SNAPSHOT",
                                                     "message": f"no snapshot {sid}"}}))
        return EXIT_ERROR
    from flud.client.manifest import snapshot_paths
    prefix = snapshot_paths(manifest.get("roots", ()), [args.path])[0].strip("/") \
        if args.path else ""
    entries = [{"path": rel, "kind": kind, "mode": mode, "mtime_ns": mtime_ns, "size": size,
                **({"target": last} if kind == "symlink" else {})}
               for rel, kind, mode, mtime_ns, size, last in manifest["entries"]
               if not prefix or rel == prefix or rel.startswith(prefix + "/")]
    print(json.dumps({"command": "ls", "snapshot": sid, "entries": entries}))
    return EXIT_OK


def cmd_backup(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "backup")


def cmd_restore(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "restore")


def cmd_verify(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "verify")
