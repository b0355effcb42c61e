"""`flud backup`'s flags for what to leave out, --dry-run and
--stdin-from-command (what they do: backup_modes.py), and the exclude
options they make. Loaded by every `flud` process that builds the parser:
it imports nothing of the client's until a flag is read."""

DEFAULT_STDIN_NAME = "stdin"


def add_backup_flags(backup) -> None:
    """The exclude, dry-run and stdin flags of `flud backup`."""
    backup.add_argument("--exclude-file", action="append", default=[], metavar="FILE",
                        help="leave out what the patterns in FILE match (gitignore syntax, "
                             "relative to each path backed up); repeatable")
    backup.add_argument("--exclude-caches", action="store_true",
                        help="a directory with a valid CACHEDIR.TAG keeps only the tag")
    backup.add_argument("--exclude-if-present", action="append", default=[], metavar="NAME",
                        help="a directory holding a file NAME keeps only that file; repeatable")
    backup.add_argument("--one-file-system", action="store_true",
                        help="do not go into other file systems (mount points are kept empty)")
    backup.add_argument("--exclude-larger-than", type=_size, default=None, metavar="SIZE",
                        help="leave out files larger than SIZE (e.g. 500M, 2G)")
    backup.add_argument("--no-ignore-files", action="store_true",
                        help="do not read .fludignore files in the tree")
    backup.add_argument("--dry-run", action="store_true",
                        help="list what would be new or changed, with bytes; send and "
                             "record nothing")
    backup.add_argument("--stdin-from-command", action="store_true",
                        help="back up the output of the command given after `--` as one "
                             "file (no snapshot if the command fails)")
    backup.add_argument("--stdin-filename", default=None, metavar="NAME",
                        help=f"the file name of that output in the snapshot "
                             f"(default {DEFAULT_STDIN_NAME!r})")


def _size(text: str) -> int:
    import argparse
    from flud.client.backup.source_excludes import parse_size
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err))


def exclude_options(args):
    """The ExcludeOptions of a `flud backup` command line."""
    from flud.client.backup.source_excludes import ExcludeOptions
    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    return ExcludeOptions(
        globs=tuple(get("exclude", ())), exclude_files=tuple(get("exclude_file", ())),
        exclude_caches=bool(get("exclude_caches")),
        if_present=tuple(get("exclude_if_present", ())),
        one_file_system=bool(get("one_file_system")), larger_than=get("exclude_larger_than"),
        ignore_files=not get("no_ignore_files"))
