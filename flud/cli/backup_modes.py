"""`flud backup`'s flags beyond the plain run: what to leave out (the
exclude options), `--dry-run` (what would be sent, nothing sent), and
`--stdin-from-command` (a command's output backed up as one file)."""
import os
import sys

from flud.cli.backup_flags import DEFAULT_STDIN_NAME, exclude_options
from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED
from flud.errors import FludError

STDIN_DIR = "stdin"    # in the client home: --stdin-from-command's placeholder and part file
SKIPPED_SHOWN = 20
INDEX_NAME = "index.sqlite"   # flud/client/home.py
EXCLUDED_SHOWN = 1000   # excluded paths in --dry-run --json (all are counted)


def check_backup_args(args):
    """A message for a command line that does not make sense, or None."""
    if args.stdin_from_command:
        if not args.paths:
            return "--stdin-from-command needs the command after `--`: " \
                   "flud backup --home H --stdin-from-command -- pg_dump mydb"
        if args.dry_run:
            return "--dry-run cannot run a command: leave one of them out"
        name = args.stdin_filename or DEFAULT_STDIN_NAME
        if "/" in name or name in (".", "..") or "\0" in name:
            return f"--stdin-filename is a file name, without '/': got {name!r}"
        return None
    if args.stdin_filename is not None:
        return "--stdin-filename goes with --stdin-from-command"
    if not args.paths:
        return "name the paths to back up (or use --stdin-from-command -- CMD ARGS)"
    return None


def _fail(args, message: str, code: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    if getattr(args, "json", False):   # JSON lines (docs/json.md): the error, the summary
        from flud.cli.jsonlines import line, summary_line
        print(line("error", "backup", level="error", code=code, message=message))
        print(summary_line("backup", {"exit": EXIT_ERROR,
                                      "error": {"code": code, "message": message}}))
    return EXIT_ERROR


def cmd_backup(args) -> int:
    from flud.cli.jobs import run_client

    problem = check_backup_args(args)
    if problem:
        return _fail(args, problem, "USAGE")
    if args.dry_run:
        return dry_run(args)
    if args.stdin_from_command:
        return backup_command_output(args, run_client)
    return run_client(args, "backup")


# ---- --dry-run --------------------------------------------------------------

def dry_run(args) -> int:
    """What the backup would do, walked against the client index; nothing is
    sent, nothing written (no lock is taken: like `flud ls`, it only reads)."""
    from flud.cli.home import open_home
    from flud.client.backup.preview import NEW, NoIndex, preview
    from flud.client.progress import human_bytes
    from flud.client.run_rows import RUN_META

    as_json = getattr(args, "json", False)
    home = open_home(args.home)
    if home is None:
        return _fail(args, "no client home there", "CLIENT_HOME")
    from flud.cli.jsonlines import line, summary_line

    out = sys.stdout
    skipped, excluded = [], []

    def on_file(entry, status):
        if status == "unchanged":
            return
        if as_json:   # a "file" line each (ASCII: a name not UTF-8 still makes valid JSON)
            out.write(line("file", "backup", path=entry.path, status=status,
                           size=entry.size) + "\n")
        else:
            mark = "+" if status == NEW else "M"
            out.write(f"{mark} {human_bytes(entry.size):>10}  {_shown(entry.path)}\n")

    def on_skip(path, why):
        if len(skipped) < SKIPPED_SHOWN:
            skipped.append((path, why))
        print(f"  skipped {_shown(path)}: {why}", file=sys.stderr)

    def on_exclude(path, why):
        if len(excluded) < EXCLUDED_SHOWN:
            excluded.append((path, why))
        if not as_json:
            out.write(f"x {'':>10}  {_shown(path)}  ({why})\n")

    error, interrupted = None, False
    try:
        exists = os.path.exists(os.path.join(home.path, INDEX_NAME))
        index = home.index if exists else NoIndex()   # a dry run creates no index
        interrupted = index.get_meta(RUN_META) is not None
        totals = preview(index, args.paths, exclude_options(args), on_file, on_skip,
                         on_exclude)
    except FludError as err:   # a bad ignore pattern: named with its file and line
        error = err
    finally:
        home.close()
    if interrupted and error is None:
        # its rows are rolled back (or adopted) when the next backup starts:
        # files it had sent may then count as changed again
        print("note: a backup was interrupted here; the next backup first settles what it "
              "left, and may then read again some files counted here as unchanged",
              file=sys.stderr)
    if error is not None:
        message = f"the dry run stopped: {error}"
        print(f"error: {message}", file=sys.stderr)
        if as_json:
            out.write(line("error", "backup", level="error", code=error.code,
                           message=message) + "\n")
            out.write(summary_line("backup", {"exit": EXIT_ERROR, "dry_run": True, "error": {
                "code": error.code, "message": message}}) + "\n")
        return EXIT_ERROR
    code = EXIT_SKIPPED if totals.skipped else EXIT_OK
    summary = {**vars(totals), "files_total": totals.files, "bytes_total": totals.bytes,
               "skipped_paths": skipped, "excluded_paths": excluded,
               "interrupted_run": interrupted, "exit": code}
    if as_json:
        out.write(summary_line("backup", {**summary, "dry_run": True}) + "\n")
    else:
        print(f"dry run: {totals.files} files ({human_bytes(totals.bytes)}): "
              f"{totals.new} new ({human_bytes(totals.new_bytes)}), "
              f"{totals.changed} changed ({human_bytes(totals.changed_bytes)}), "
              f"{totals.unchanged} unchanged ({human_bytes(totals.unchanged_bytes)}); "
              f"{totals.excluded} excluded, {totals.skipped} skipped. Nothing was sent.")
    return code


def _shown(path: str) -> str:
    """A path as a terminal can print it (a name that is not UTF-8 shows U+FFFD)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# ---- --stdin-from-command ---------------------------------------------------

def backup_command_output(args, run_client) -> int:
    """Back up the command's output as NAME, streamed (flud/client/backup/
    command_stream.py): the snapshot's one root. The job lock is held from
    before the command starts to the end; the command is killed if the
    backup ends before its output does."""
    from flud.agent.lock import HomeBusy, HomeLock
    from flud.client.backup.command_stream import (CommandFailed, CommandStream,
                                                   make_placeholder)
    from flud.client.home import ClientHome, HomeError

    try:
        home = ClientHome(args.home)
    except HomeError as err:
        return _fail(args, str(err), "CLIENT_HOME")
    home_path, small_limit = home.path, home.config["small_file_limit"]
    home.close()
    lock = HomeLock(home_path)
    try:
        lock.acquire()
    except HomeBusy as err:
        return _fail(args, str(err), err.code)
    name = args.stdin_filename or DEFAULT_STDIN_NAME
    stream_dir = os.path.join(home_path, STDIN_DIR)
    placeholder = os.path.join(stream_dir, name)
    stream = CommandStream(args.paths, placeholder, os.path.join(stream_dir, f".{name}.part"))
    try:
        try:
            os.makedirs(stream_dir, mode=0o700, exist_ok=True)
            make_placeholder(placeholder, max(small_limit, 1))
        except OSError as err:
            return _fail(args, f"cannot write in {stream_dir}: {err.strerror or err}", "STDIN_DIR")
        try:
            stream.start()
        except CommandFailed as err:
            return _fail(args, str(err), err.code)
        print(f"backing up the output of `{stream.shown}` as {name}", file=sys.stderr)
        args.paths = [placeholder]
        args.lock_held = True
        args.stream_source = stream
        return run_client(args, "backup")
    finally:
        stream.stop()
        _remove(placeholder)
        lock.release()


def _remove(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
