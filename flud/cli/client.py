"""Client subcommands: init, key, backup, ls, restore, verify. Each imports
the client's modules when it runs: building the parser (which every `flud`
process does, a node too) loads none of them."""
import sys

from flud.cli.backup_flags import add_backup_flags
from flud.cli.exits import EXIT_ERROR, EXIT_OK
from flud.cli.home import open_home
from flud.cli.node import parse_address
from flud.cli.restoring import add_dump_command, add_restore_flags


def add_client_commands(sub) -> None:
    init = sub.add_parser("init", help="create a client home")
    init.add_argument("--home", required=True)
    where = init.add_mutually_exclusive_group(required=True)
    where.add_argument("--testnet", metavar="DIR", help="a local testnet directory")
    where.add_argument("--join", metavar="HOST:PORT", help="any node of the network")
    init.add_argument("--import-key", metavar="FILE",
                      help="a key exported with `flud key export` (a file, or the typed "
                           "lines of a paper key)")
    init.add_argument("--k", type=int, help="shares needed to restore (default 4)")
    init.add_argument("--n", type=int, help="shares stored per segment (default 8)")
    init.add_argument("--segment-size", type=int, help="bytes per segment (default 2 MiB)")
    init.set_defaults(handler=cmd_init)

    from flud.cli.passphrase import add_passphrase_options
    add_passphrase_options(init, remember=False)
    from flud.cli.keys import add_key_commands
    add_key_commands(sub)

    backup = sub.add_parser("backup", help="back up directories")
    backup.add_argument("paths", nargs="*", metavar="PATH",
                        help="files and directories (with --stdin-from-command: the command)")
    backup.add_argument("--home", required=True)
    backup.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="leave out names or paths matching GLOB; repeatable")
    add_backup_flags(backup)
    backup.add_argument("--memory-log", metavar="FILE")
    backup.add_argument("--memory-budget", type=_mib, metavar="SIZE",
                        help="transfer buffers held at once: 64M, 1GiB; a number alone is "
                             "MiB (default 64)")
    backup.add_argument("--parallel-files", type=_positive, default=None, metavar="N",
                        help="large files uploaded at once (default 3)")
    backup.add_argument("--tag", action="append", default=[], metavar="TAG",
                        help="a tag for the snapshot (repeatable)")
    backup.add_argument("--hooks", action="store_true",
                        help="run agent.toml's [hooks] (before_backup, after_backup, "
                             "on_error) around this backup, as the agent does")
    _job_flags(backup)
    backup.set_defaults(handler=cmd_backup)

    ls = sub.add_parser("ls", help="list snapshots, or the files of one")
    ls.add_argument("path", nargs="?")
    ls.add_argument("--home", required=True)
    ls.add_argument("--snapshot", type=int)
    ls.add_argument("--dir", metavar="PATH",
                    help="list only the entries of this directory of the snapshot (as `ls` "
                         "prints paths; / for the top), not the tree below it")
    ls.add_argument("--remote", action="store_true",
                    help="list the snapshots the nodes hold, not the local index's")
    _job_flags(ls)
    ls.set_defaults(handler=cmd_ls)

    find = sub.add_parser("find", help="search snapshots for paths (a glob)")
    find.add_argument("pattern", help="a glob on names, or on whole paths if it holds '/'")
    find.add_argument("--home", required=True)
    find.add_argument("--snapshot", type=int, help="only this snapshot (default: all)")
    _job_flags(find)
    find.set_defaults(handler=lambda args: _network_job(args, "find"))

    stats = sub.add_parser("stats", help="sizes: restore size, unique and stored bytes, "
                                         "compression and dedup, bytes on each node")
    stats.add_argument("--home", required=True)
    stats.add_argument("--snapshot", type=int, help="only this snapshot (default: all; the "
                                                     "bytes per node need all)")
    _job_flags(stats)
    stats.set_defaults(handler=lambda args: _network_job(args, "stats"))

    check = sub.add_parser("check", help="challenge a rotating part of your shares; repair")
    check.add_argument("--home", required=True)
    check.add_argument("--read-data-subset", metavar="n/N|FRACTION",
                       help="also download and hash-check the n-th of N parts of the "
                            "objects, or this fraction of them")
    check.add_argument("--repair", action="store_true",
                       help="re-create the shares of objects below the repair threshold")
    check.add_argument("--unreachable-grace", default="3d", metavar="DURATION",
                       type=_duration_text,
                       help="how long a node may be unreachable before its shares count "
                            "as lost (default 3d; 0: at once)")
    check.add_argument("--repair-below", type=int, default=None, metavar="M",
                       help="the repair threshold: repair objects with fewer than M healthy "
                            "shares (k < M <= n; default n-1, 7 for 4-of-8; n: restore full "
                            "redundancy at the first lost share)")
    check.add_argument("--safety-margin", type=int, default=None, metavar="S",
                       help="repair at once, whatever the grace, when an object has k+S "
                            "or fewer confirmed shares (default 2: 6 for 4-of-8)")
    _job_flags(check)
    check.set_defaults(handler=lambda args: _network_job(args, "check"))

    forget = sub.add_parser("forget", help="remove snapshots from the list, by policy or id")
    forget.add_argument("snapshots", nargs="*", type=int, metavar="SNAPSHOT")
    forget.add_argument("--home", required=True)
    forget.add_argument("--keep-last", type=int, default=0, metavar="N",
                        help="keep the N newest snapshots")
    for period, unit in (("hourly", "hours"), ("daily", "days"), ("weekly", "weeks"),
                         ("monthly", "months"), ("yearly", "years")):
        forget.add_argument(f"--keep-{period}", type=int, default=0, metavar="N",
                            help=f"keep the newest snapshot of each of the last N {unit} "
                                 f"that have one (-1: all)")
    forget.add_argument("--keep-within", metavar="DURATION", type=_duration_text,
                        help="keep every snapshot within DURATION (7d, 2w, 1y2mo) of the "
                             "newest ('m' is refused: write 'mo' for months, 'min' for "
                             "minutes)")
    forget.add_argument("--keep-tag", action="append", default=[], metavar="T",
                        help="keep snapshots tagged T (a,b: both); repeatable")
    forget.add_argument("--dry-run", action="store_true", help="say what would be removed")
    forget.add_argument("--prune", action="store_true", help="prune afterwards")
    _prune_options(forget)
    _job_flags(forget)
    forget.set_defaults(handler=lambda args: _network_job(args, "forget"))

    prune = sub.add_parser("prune", help="delete from the nodes what no kept snapshot needs")
    prune.add_argument("--home", required=True)
    prune.add_argument("--dry-run", action="store_true", help="say what would be deleted")
    _prune_options(prune)
    _job_flags(prune)
    prune.set_defaults(handler=lambda args: _network_job(args, "prune"))

    tag = sub.add_parser("tag", help="change the tags or protection of snapshots")
    tag.add_argument("snapshots", nargs="+", type=int, metavar="SNAPSHOT")
    tag.add_argument("--home", required=True)
    tag.add_argument("--add", action="append", default=[], metavar="T")
    tag.add_argument("--remove", action="append", default=[], metavar="T")
    protection = tag.add_mutually_exclusive_group()
    protection.add_argument("--protect", action="store_true",
                            help="no policy removes it (forget refuses to name it)")
    protection.add_argument("--unprotect", action="store_true")
    _job_flags(tag)
    tag.set_defaults(handler=lambda args: _network_job(args, "tag"))

    diff = sub.add_parser("diff", help="paths added, removed and changed between snapshots")
    diff.add_argument("old", type=int)
    diff.add_argument("new", type=int)
    diff.add_argument("--home", required=True)
    _job_flags(diff)
    diff.set_defaults(handler=lambda args: _network_job(args, "diff"))

    restore = sub.add_parser("restore", help="restore a snapshot")
    restore.add_argument("paths", nargs="*", help="parts of the snapshot (default: all)")
    restore.add_argument("--home", required=True)
    restore.add_argument("--to", required=True, metavar="DEST")
    restore.add_argument("--snapshot", type=int)
    restore.add_argument("--numeric-ids", action="store_true",
                         help="as root: owners by the numbers recorded, not by their names")
    restore.add_argument("--memory-log", metavar="FILE")
    restore.add_argument("--memory-budget", type=_mib, metavar="SIZE",
                         help="transfer buffers held at once: 64M, 1GiB; a number alone is "
                              "MiB (default 64)")
    _job_flags(restore)
    add_restore_flags(restore)
    restore.set_defaults(handler=cmd_restore)
    add_dump_command(sub, _mib, _rate)

    verify = sub.add_parser("verify", help="challenge the nodes holding your shares")
    verify.add_argument("--home", required=True)
    verify.add_argument("--sample", type=float, default=1.0, metavar="FRACTION")
    verify.add_argument("--snapshot", type=int)
    verify.add_argument("--full", action="store_true",
                        help="challenge every byte of every share (runs otherwise alternate "
                             "between that and a spot check of one 64 KiB span)")
    _job_flags(verify)
    verify.set_defaults(handler=cmd_verify)
    _add_adopt(sub)


def _add_adopt(sub) -> None:
    adopt = sub.add_parser(
        "adopt", help="make this home the one that writes the repository (one key, one writer)",
        description="Take over the nodes' head: this home's index is rebuilt from it and "
                    "this home becomes the writer; another home with the same key is "
                    "refused from then on (backup, forget, tag, prune). For a home made "
                    "with `init --import-key`, or one that was refused with OTHER_WRITER.")
    adopt.add_argument("--home", required=True)
    adopt.add_argument("--accept-older", action="store_true",
                       help="take the nodes' head even if it is older than the one this home "
                            "wrote last (refused with STALE_ROOT otherwise), or when most "
                            "of the nodes the newest root was written to are gone "
                            "(ROOT_UNCONFIRMED): only when those nodes are gone for good")
    _job_flags(adopt)
    adopt.set_defaults(handler=lambda args: _network_job(args, "adopt"))


def _prune_options(parser) -> None:
    parser.add_argument("--grace", default="24h", metavar="DURATION", type=_duration_text,
                        help="delete only what was found unreferenced this long ago, in two "
                             "runs in a row (default 24h; 0: at once)")
    parser.add_argument("--max-unused", type=int, default=50, metavar="PERCENT",
                        help="repack a bundle more than this dead (default 50)")


def _job_flags(parser) -> None:
    """What every client job takes: its summary as JSON, and rate limits."""
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout "
                             "(progress and messages go to stderr)")
    parser.add_argument("--limit-upload", type=_rate, default=0, metavar="RATE",
                        help="upload at most RATE: 1MiB/s, 500K; a number alone is KiB/s "
                             "(default: no limit)")
    parser.add_argument("--limit-download", type=_rate, default=0, metavar="RATE",
                        help="download at most RATE: 1MiB/s, 500K; a number alone is KiB/s "
                             "(default: no limit)")
    parser.add_argument("--limit-schedule", type=_schedule, default=None, metavar="JSON",
                        help="rate limits by time of day, followed while the job runs (the "
                             "agent passes its [[bandwidth]] windows)")


def _rate(text: str) -> int:
    from flud.cli.arguments import rate_arg
    return rate_arg(text)


def _schedule(text: str) -> str:
    import argparse
    from flud.agent.bandwidth import schedule_from_json
    try:
        schedule_from_json(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err))
    return text


def _duration_text(text: str) -> str:
    from flud.cli.arguments import duration_text
    return duration_text(text)


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
    """A size in flud's grammar; a number alone is MiB (as it always was)."""
    from flud.cli.arguments import size_arg
    value = size_arg("m")(text)
    if value < 1024 * 1024:
        import argparse
        raise argparse.ArgumentTypeError(f"expected at least 1MiB, got {text!r}")
    return value


def cmd_init(args) -> int:
    from flud.client.home import HomeError, create_home
    from flud.errors import FludError
    from flud.cli.keys import read_key_file

    identity = secret = None
    if args.import_key:
        try:
            identity, secret = read_key_file(args.import_key, args)
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
    else:   # one key, one writer (README, "If you lose everything")
        print(f"this home reads (ls, restore) what the key's backups hold; it writes "
              f"(backup, forget, tag, prune) only after `flud adopt --home {args.home}`, which "
              f"makes it the writer and refuses the home it replaces from then on")
    _init_lease_note(bool(args.import_key))
    return EXIT_OK


def _init_lease_note(imported: bool) -> None:
    """What the nodes' leases mean for this home, said before it matters."""
    if imported:
        print("the nodes keep this key's data for their lease (a year by default) after a "
              "job of the old home last reached them: restore now (every job renews the "
              "leases; `flud ls` then says until when)")
    else:
        print("the nodes keep your data for their lease (a year by default) after a job "
              "last reached them: run a backup, check or any other job at least that often "
              "(`flud ls` says until when)")


def _print_lease_line(home) -> None:
    """Until when the nodes keep this home's data (client/lease_renewal.py)."""
    from flud.client.lease_renewal import kept_until_line
    print(kept_until_line(home.index))


def cmd_ls(args) -> int:
    home = open_home(args.home)
    if home is None:
        return EXIT_ERROR
    try:
        return _list(home, args)
    finally:
        home.close()


def _list(home, args) -> int:
    """Snapshots from the local index; the files of one (or the snapshots
    after a total loss, or with --remote) from the nodes."""
    from flud.cli.snapshot_lines import list_local

    snapshots = home.index.snapshots()
    if getattr(args, "dir", None) is not None:   # one directory: from the nodes' trees
        home.close()
        return _network_job(args, "ls")
    if getattr(args, "json", False) and not args.remote:
        return _list_json(home, args, snapshots)
    if args.snapshot is None and not args.path and not args.remote:
        if not snapshots:
            print("no snapshots in the local index (after a total loss, `flud ls --remote` "
                  "lists those the nodes hold, and `flud restore` fetches them)")
        code = list_local(home.index)
        _print_lease_line(home)
        return code
    manifest = None
    if snapshots and any("manifest_ref" in s for s in snapshots):
        sid = args.snapshot or snapshots[-1]["id"]
        manifest = home.index.manifest(sid)
    if manifest is None:
        home.close()
        return _network_job(args, "ls")
    from flud.cli.snapshot_lines import entry_line
    from flud.client.repository.snapshot_paths import snapshot_paths

    prefix = snapshot_paths(manifest.get("roots", ()), [args.path])[0].strip("/") \
        if args.path else ""
    from flud.client.records import SYMLINK, entries_from_wire
    for rel, kind, mode, mtime_ns, size, last in entries_from_wire(manifest["entries"]):
        if prefix and not (rel == prefix or rel.startswith(prefix + "/")):
            continue
        print(entry_line(rel, kind, mode, mtime_ns, size, last if kind == SYMLINK else ""))
    return EXIT_OK


def _list_json(home, args, snapshots) -> int:
    """`flud ls --json`: the snapshots, or one snapshot's entries, as one object."""
    from flud.cli.jsonlines import summary_line
    if args.snapshot is None and not args.path:
        from flud.client.lease_renewal import kept_until
        print(summary_line("ls", {"exit": EXIT_OK, "snapshots": [
            {"id": s["id"], "created": s["created"], "files": s.get("files", 0),
             "bytes": s.get("bytes", 0), "host": s.get("host", ""),
             "paths": s.get("roots", []), "tags": s.get("tags", [])} for s in snapshots],
            "leases": kept_until(home.index)}))
        return EXIT_OK
    sid = args.snapshot or (snapshots[-1]["id"] if snapshots else None)
    manifest = home.index.manifest(sid) if sid is not None else None
    if manifest is None:   # a version-2 snapshot: its trees are on the nodes
        home.close()
        return _network_job(args, "ls")
    from flud.client.repository.snapshot_paths import snapshot_paths
    prefix = snapshot_paths(manifest.get("roots", ()), [args.path])[0].strip("/") \
        if args.path else ""
    from flud.client.records import KIND_NAMES, SYMLINK, entries_from_wire
    entries = [{"path": rel, "kind": KIND_NAMES[kind], "mode": mode, "mtime_ns": mtime_ns,
                "size": size, **({"target": last} if kind == SYMLINK else {})}
               for rel, kind, mode, mtime_ns, size, last in entries_from_wire(manifest["entries"])
               if not prefix or rel == prefix or rel.startswith(prefix + "/")]
    print(summary_line("ls", {"exit": EXIT_OK, "snapshot": sid, "entries": entries}))
    return EXIT_OK


def _network_job(args, job: str) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, job)


def cmd_backup(args) -> int:
    from flud.cli.backup_modes import cmd_backup as backup
    if getattr(args, "hooks", False):
        from flud.cli.hooks import backup_with_hooks
        return backup_with_hooks(args, lambda: backup(args))
    return backup(args)


def cmd_restore(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "restore")


def cmd_verify(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "verify")
