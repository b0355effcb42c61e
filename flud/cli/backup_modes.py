"""`flud backup`'s flags beyond the plain run: what to leave out (the
exclude options), `--dry-run` (what would be sent, nothing sent), and
`--stdin-from-command` (a command's output backed up as one file)."""
import json
import os
import sys

from flud.cli.backup_flags import DEFAULT_STDIN_NAME, exclude_options
from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED
from flud.errors import FludError

# The command's output is copied to the spool this much at a time: the
# copy's memory, whatever the output's size.
SPOOL_CHUNK = 1024 * 1024
STDIN_DIR = "stdin"           # in the client home: where a command's output is spooled
SKIPPED_SHOWN = 20
INDEX_NAME = "index.sqlite"   # flud/client/home.py
EXCLUDED_SHOWN = 1000   # excluded paths in --dry-run --json (all are counted)


class CommandFailed(FludError):
    """--stdin-from-command: the command could not run, or exited non-zero."""

    code = "COMMAND_FAILED"


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
    if getattr(args, "json", False):
        print(json.dumps({"command": "backup", "exit": EXIT_ERROR,
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
    out = sys.stdout
    skipped, excluded = [], []
    first = [True]

    def on_file(entry, status):
        if status == "unchanged":
            return
        if as_json:   # (ASCII: a name that is not UTF-8 still makes valid JSON)
            out.write(("" if first[0] else ",\n") + json.dumps(
                {"path": entry.path, "status": status, "size": entry.size}))
            first[0] = False
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

    if as_json:
        out.write('{"command": "backup", "dry_run": true, "files": [\n')
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
            out.write("\n], " + json.dumps({"exit": EXIT_ERROR, "error": {
                "code": error.code, "message": message}})[1:] + "\n")
        return EXIT_ERROR
    code = EXIT_SKIPPED if totals.skipped else EXIT_OK
    summary = {**vars(totals), "files_total": totals.files, "bytes_total": totals.bytes,
               "skipped_paths": skipped, "excluded_paths": excluded,
               "interrupted_run": interrupted, "exit": code}
    if as_json:
        out.write("\n], " + json.dumps(summary)[1:] + "\n")
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

def spool_command_output(argv, path: str, chunk: int = SPOOL_CHUNK) -> int:
    """Run argv, its output copied to `path` (mode 0600) CHUNK bytes at a
    time; its stderr goes to ours. Returns the bytes written; CommandFailed
    if it cannot start or exits non-zero (the spool is then removed)."""
    import subprocess

    shown = " ".join(argv)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    written = 0
    try:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    bufsize=0)
        except OSError as err:
            raise CommandFailed(f"cannot run `{shown}`: {err.strerror or err}") from None
        buffer = bytearray(chunk)
        view = memoryview(buffer)
        try:
            while True:
                got = proc.stdout.readinto(buffer)
                if not got:
                    break
                _write_all(fd, view[:got])
                written += got
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stdout.close()
        status = proc.wait()
        if status != 0:
            how = f"was killed by signal {-status}" if status < 0 else f"exited with {status}"
            raise CommandFailed(f"`{shown}` {how} after {written} bytes of output: "
                                f"no snapshot was made")
    except BaseException:
        os.close(fd)
        fd = None
        _remove(path)
        raise
    finally:
        if fd is not None:
            os.close(fd)
    return written


def _write_all(fd, data) -> None:
    while data:
        done = os.write(fd, data)
        data = data[done:]


def _remove(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def backup_command_output(args, run_client) -> int:
    """Spool the command's output in the client home (bounded memory: one
    chunk), back it up as NAME (the snapshot's one root), remove the spool.
    The job lock is held from before the command runs to the end."""
    from flud.agent.lock import HomeBusy, HomeLock
    from flud.client.home import ClientHome, HomeError

    try:
        home = ClientHome(args.home)
    except HomeError as err:
        return _fail(args, str(err), "CLIENT_HOME")
    home_path = home.path
    home.close()
    lock = HomeLock(home_path)
    try:
        lock.acquire()
    except HomeBusy as err:
        return _fail(args, str(err), err.code)
    command = list(args.paths)
    name = args.stdin_filename or DEFAULT_STDIN_NAME
    spool_dir = os.path.join(home_path, STDIN_DIR)
    path = os.path.join(spool_dir, name)
    try:
        os.makedirs(spool_dir, mode=0o700, exist_ok=True)
        try:
            size = spool_command_output(command, path)
        except CommandFailed as err:
            return _fail(args, str(err), err.code)
        except OSError as err:   # the home's disk is full, or cannot be written
            return _fail(args, f"the output of `{' '.join(command)}` could not be spooled to "
                               f"{path}: {err.strerror or err}; no snapshot was made", "SPOOL")
        print(f"`{' '.join(command)}` wrote {size} bytes; backing them up as {name}",
              file=sys.stderr)
        args.paths = [path]
        args.lock_held = True
        args.summary = {"stdin": {"command": command, "filename": name, "bytes": size}}
        return run_client(args, "backup")
    finally:
        _remove(path)
        lock.release()
