"""`flud key export | passwd | import`: the key for safekeeping, in a file
or on paper, and a new passphrase for an exported key file."""
import datetime
import os
import re
import sys

from flud.cli.exits import EXIT_ERROR, EXIT_OK
from flud.cli.passphrase import add_passphrase_options
from flud.errors import FludError


def add_key_commands(sub) -> None:
    key = sub.add_parser("key", help="the key: export it (file or paper), change its "
                                     "passphrase, type a paper key back").add_subparsers(
        dest="action", required=True)
    export = key.add_parser("export", help="write the key, protected by a passphrase")
    export.add_argument("--home", required=True)
    export.add_argument("file", help="where to write it ('-' with --paper: standard output)")
    export.add_argument("--force", action="store_true", help="replace FILE if it exists")
    export.add_argument("--paper", action="store_true",
                        help="lines a person can type back, each with a checksum, to print "
                             "and keep on paper")
    add_passphrase_options(export)
    export.set_defaults(handler=cmd_key_export)

    passwd = key.add_parser("passwd", help="change the passphrase of an exported key file")
    passwd.add_argument("file", help="a key file written by `flud key export`")
    add_passphrase_options(passwd, new=True)
    passwd.set_defaults(handler=cmd_key_passwd)

    imported = key.add_parser("import", help="type a paper key back into a key file")
    imported.add_argument("--paper", action="store_true", required=True,
                          help="read the lines of `flud key export --paper`")
    imported.add_argument("--from", dest="source", metavar="FILE",
                          help="the typed lines (default: asked line by line on the "
                               "terminal, or read from standard input)")
    imported.add_argument("file", help="the key file to write (for `flud init --import-key`)")
    imported.add_argument("--force", action="store_true", help="replace FILE if it exists")
    add_passphrase_options(imported)
    imported.set_defaults(handler=cmd_key_import)


def _fail(message) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


def cmd_key_export(args) -> int:
    from flud.cli.passphrase import check_length, get_passphrase, keyring_set
    from flud.client.home import ClientHome, HomeError
    from flud.keys import export_secret_bundle, write_private_file

    try:
        home = ClientHome(args.home)
    except HomeError as err:
        return _fail(err)
    to_stdout = args.paper and args.file == "-"
    exists = (f"{args.file} already exists; choose another file, or add --force to "
              f"replace it")
    if not to_stdout and os.path.lexists(args.file) and not args.force:
        return _fail(exists)            # before asking for the passphrase
    try:
        passphrase = get_passphrase(args, "passphrase to protect the key: ")
        check_length(passphrase)
        if args.remember:
            keyring_set(passphrase)
    except FludError as err:
        return _fail(err)
    if args.paper:
        from flud import paperkey
        data = paperkey.page(paperkey.seal(home.identity, home.secret, passphrase),
                             home.identity.node_id_hex[:16],
                             datetime.date.today().isoformat()).encode()
    else:
        data = export_secret_bundle(home.identity, home.secret, passphrase)
    if to_stdout:
        sys.stdout.write(data.decode())
        print("print these lines and keep them safe; type them back with "
              "`flud key import --paper KEYFILE` (asked line by line)", file=sys.stderr)
        return EXIT_OK
    try:
        write_private_file(args.file, data, replace=args.force)
    except FileExistsError:             # made since the check above
        return _fail(exists)
    what = "paper key" if args.paper else "key"
    print(f"{what} written to {args.file} (mode 0600); restore with "
          f"`flud init --home NEW --import-key {args.file} --join HOST:PORT`")
    from flud.client.lease_renewal import kept_until_line
    print(kept_until_line(home.index))
    return EXIT_OK


def read_key_file(path: str, args, prompt: str = "passphrase: "):
    """(identity, user secret) from an exported key file or a paper key's
    lines in a file; the passphrase from args' sources."""
    from flud import paperkey
    from flud.cli.passphrase import get_passphrase
    from flud.keys import BUNDLE_MAGIC, import_secret_bundle

    try:
        with open(path, "rb") as f:
            blob = f.read(1 << 20)
    except FileNotFoundError:
        raise FludError(f"no key file at {path}") from None
    if blob.startswith(BUNDLE_MAGIC):
        return import_secret_bundle(blob, get_passphrase(args, prompt))
    text = blob.decode("utf-8", "replace")
    if not any(paperkey.read_line_number(line) for line in text.splitlines()):
        raise FludError(f"{path} is neither a key file written by `flud key export` (no "
                        f"FLUDKEY1 header) nor the typed lines of a paper key; check that "
                        f"you picked the right file")
    payload = paperkey.from_lines(text)   # names mistyped lines
    return paperkey.unseal(payload, get_passphrase(args, prompt))


def cmd_key_passwd(args) -> int:
    """Re-wrap an exported key under a new passphrase, crash-safe: the new
    file is written beside it, fsynced, read back, then renamed over it;
    until that rename the old file is whole and opens with the old one."""
    from flud.cli.passphrase import get_new_passphrase, get_passphrase, keyring_set
    from flud.keys import BUNDLE_MAGIC, export_secret_bundle, import_secret_bundle
    from flud.keys import write_private_file

    try:
        with open(args.file, "rb") as f:
            blob = f.read(1 << 20)
    except OSError as err:
        return _fail(f"cannot read {args.file}: {err.strerror or err}")
    if not blob.startswith(BUNDLE_MAGIC):
        return _fail(f"{args.file} is not a key file written by `flud key export` (a paper "
                     f"key: type it back with `flud key import --paper`, then change that)")
    try:
        identity, secret = import_secret_bundle(blob, get_passphrase(args, "current passphrase: "))
        new = get_new_passphrase(args)
        fresh = export_secret_bundle(identity, secret, new)
        beside = os.path.join(os.path.dirname(os.path.abspath(args.file)),
                              f".{os.path.basename(args.file)}.new")
        write_private_file(beside, fresh)           # fsynced, 0600
        with open(beside, "rb") as f:
            again, _ = import_secret_bundle(f.read(), new)
        if again.node_id != identity.node_id:
            raise FludError(f"{beside} did not read back as written; {args.file} is unchanged")
        os.replace(beside, args.file)
        _fsync_dir(args.file)
        if args.remember:
            keyring_set(new)
    except FludError as err:
        return _fail(err)
    print(f"{args.file}: the key is now protected by the new passphrase")
    return EXIT_OK


def cmd_key_import(args) -> int:
    from flud import paperkey
    from flud.cli.passphrase import check_length, get_passphrase, keyring_set
    from flud.keys import export_secret_bundle, write_private_file

    if os.path.lexists(args.file) and not args.force:
        return _fail(f"{args.file} already exists; choose another file, or add --force")
    try:
        if args.source:
            with open(args.source, encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 20)
        elif sys.stdin.isatty():
            text = _type_lines()
        else:
            text = sys.stdin.read(1 << 20)
        payload = paperkey.from_lines(text)
        passphrase = get_passphrase(args, "the paper key's passphrase: ")
        identity, secret = paperkey.unseal(payload, passphrase)
        check_length(passphrase)
        write_private_file(args.file, export_secret_bundle(identity, secret, passphrase),
                           replace=args.force)
        if args.remember:
            keyring_set(passphrase)
    except OSError as err:
        return _fail(f"{getattr(err, 'filename', '') or args.file}: {err.strerror or err}")
    except FludError as err:
        return _fail(err)
    print(f"key of client {identity.node_id_hex[:16]} written to {args.file} (the same "
          f"passphrase); restore with `flud init --home NEW --import-key {args.file} "
          f"--join HOST:PORT`")
    return EXIT_OK


def _type_lines() -> str:
    """Ask for the lines one at a time; a mistyped line is asked again at once."""
    from flud import paperkey
    lines, number, needed = [], 1, None
    while needed is None or number <= needed:
        raw = input(f"line {number:02d}: ")
        numbered = re.match(r"\s*\d{1,3}\s*[:.)]", raw)   # "07: ..." or just the characters
        text = raw if numbered else f"{number:02d}: {raw}"
        try:
            parsed = paperkey.read_line(text, expected=number)
        except paperkey.BadPaperLine as err:
            print(f"  {err}; type line {number:02d} again", file=sys.stderr)
            continue
        if parsed is None:
            continue
        lines.append(text)
        if number == 1:
            needed = paperkey.lines_needed(parsed[1])
        number += 1
    return "\n".join(lines)


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
