"""The flags that steer a restore (`--overwrite`, `--include`, `--exclude`,
`--delete`) and the `flud dump` command: parsed here, run by flud/cli/jobs.py.
Building the parser loads none of the client's modules."""

OVERWRITE_MODES = ("never", "if-changed", "if-newer", "always")   # restore/overwrite.MODES


def add_restore_flags(restore) -> None:
    restore.add_argument(
        "--overwrite", choices=OVERWRITE_MODES, default="never",
        help="a name already under DEST: never (default: restored beside it as "
             "NAME.flud-restored), if-changed (kept if it holds the snapshot's content, "
             "checked by its hash; else replaced, fetching only the segments that differ: "
             "resumes an interrupted restore), if-newer (replaced only by a newer copy), "
             "always")
    restore.add_argument("--include", action="append", default=[], metavar="PATTERN",
                         help="restore only what matches (gitignore syntax, on the paths "
                              "`flud ls` shows; repeatable)")
    restore.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                         help="do not restore what matches (gitignore syntax; repeatable)")
    restore.add_argument("--dry-run", action="store_true",
                         help="say what the restore would do (files new, replaced, kept, "
                              "bytes to fetch, what --delete would remove); nothing is "
                              "fetched or written")
    restore.add_argument("--delete", action="store_true",
                         help="remove what DEST's restored directories hold that the "
                              "snapshot does not (within the selection; needs --overwrite "
                              "other than never)")


def add_dump_command(sub, mib, rate) -> None:
    """mib, rate: the argument types the other jobs' --memory-budget and
    --limit-download use (flud/cli/client.py)."""
    dump = sub.add_parser("dump", help="write a file of a snapshot to stdout, or a "
                                       "directory as a tar stream")
    dump.add_argument("path", metavar="PATH",
                      help="a name under the snapshot, or the original absolute path")
    dump.add_argument("--home", required=True)
    dump.add_argument("--snapshot", type=int)
    dump.add_argument("--archive", choices=("tar",), default="tar",
                      help="how a directory is written (tar, streamed)")
    dump.add_argument("--memory-budget", type=mib, metavar="MIB",
                      help="MiB of transfer buffers held at once (default 64)")
    dump.add_argument("--limit-download", type=rate, default=0, metavar="RATE",
                      help="download at most RATE: KiB/s, or 500K, 10M (default: no limit)")
    dump.add_argument("--json", action="store_true",
                      help="end with the summary as one JSON line on stderr (stdout is the "
                           "data)")
    dump.set_defaults(handler=_cmd_dump)


def _cmd_dump(args) -> int:
    from flud.cli.jobs import run_client
    return run_client(args, "dump")
