"""Where a passphrase comes from, first found wins:

    --passphrase-file FILE      its first line
    --passphrase-command CMD    the first line CMD prints (run without a shell)
    FLUD_PASSPHRASE_FILE, FLUD_PASSPHRASE_COMMAND, FLUD_PASSPHRASE
    the OS keyring              service "flud", entry "key-passphrase" (stored by
                                `--remember`; FLUD_KEYRING=0 leaves it alone)
    the terminal                asked (twice for a new passphrase)

A new passphrase (`flud key passwd`) has its own --new-passphrase-file,
--new-passphrase-command and FLUD_NEW_PASSPHRASE, then the terminal.
"""
import os
import sys

from flud.errors import FludError

KEYRING_SERVICE = "flud"
KEYRING_ENTRY = "key-passphrase"
COMMAND_TIMEOUT = 120.0     # a command may ask a person (a password manager's unlock)
MIN_LENGTH = 8


class NoPassphrase(FludError):
    """No passphrase source, and no terminal to ask on."""

    code = "NO_PASSPHRASE"


class PassphraseSourceFailed(FludError):
    """A passphrase file or command named cannot give one."""

    code = "PASSPHRASE_SOURCE"


def add_passphrase_options(parser, new: bool = False, remember: bool = True) -> None:
    parser.add_argument("--passphrase-file", metavar="FILE",
                        help="read the passphrase from FILE's first line")
    parser.add_argument("--passphrase-command", metavar="CMD",
                        help="run CMD (no shell) and use the first line it prints")
    if new:
        parser.add_argument("--new-passphrase-file", metavar="FILE",
                            help="the new passphrase, from FILE's first line")
        parser.add_argument("--new-passphrase-command", metavar="CMD",
                            help="the new passphrase, from CMD's first line")
    if remember:
        parser.add_argument("--remember", action="store_true",
                            help="keep the passphrase in the OS keyring (read from there "
                                 "when no other source is given)")


def get_passphrase(args, prompt: str, env=None) -> str:
    """The passphrase from the first source given (see the module's list)."""
    env = os.environ if env is None else env
    for source, read in ((getattr(args, "passphrase_file", None), from_file),
                         (getattr(args, "passphrase_command", None), from_command),
                         (env.get("FLUD_PASSPHRASE_FILE"), from_file),
                         (env.get("FLUD_PASSPHRASE_COMMAND"), from_command)):
        if source:
            return read(source)
    if env.get("FLUD_PASSPHRASE") is not None:
        return env["FLUD_PASSPHRASE"]
    stored = keyring_get(env)
    if stored is not None:
        return stored
    return _ask(prompt, confirm=False)


def get_new_passphrase(args, env=None) -> str:
    """A new passphrase: its own file, command or FLUD_NEW_PASSPHRASE, else
    asked twice on the terminal; at least MIN_LENGTH characters."""
    env = os.environ if env is None else env
    if getattr(args, "new_passphrase_file", None):
        passphrase = from_file(args.new_passphrase_file)
    elif getattr(args, "new_passphrase_command", None):
        passphrase = from_command(args.new_passphrase_command)
    elif env.get("FLUD_NEW_PASSPHRASE") is not None:
        passphrase = env["FLUD_NEW_PASSPHRASE"]
    else:
        passphrase = _ask("new passphrase: ", confirm=True)
    check_length(passphrase)
    return passphrase


def check_length(passphrase: str) -> None:
    if len(passphrase) < MIN_LENGTH:
        raise PassphraseSourceFailed(f"use a passphrase of at least {MIN_LENGTH} characters")


def from_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except OSError as err:
        raise PassphraseSourceFailed(f"cannot read the passphrase file {path}: "
                                     f"{err.strerror or err}") from None
    except UnicodeDecodeError:
        raise PassphraseSourceFailed(f"the passphrase file {path} is not UTF-8 text") from None
    passphrase = line.rstrip("\r\n")
    if not passphrase:
        raise PassphraseSourceFailed(f"the passphrase file {path} starts with an empty line")
    return passphrase


def from_command(command: str) -> str:
    import shlex
    import subprocess   # here: building the parser (every node does) must not load it
    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise PassphraseSourceFailed(f"cannot split the passphrase command: {err}") from None
    if not argv:
        raise PassphraseSourceFailed("the passphrase command is empty")
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PassphraseSourceFailed(f"the passphrase command {argv[0]!r} could not run: "
                                     f"{err}") from None
    if done.returncode != 0:
        raise PassphraseSourceFailed(f"the passphrase command {argv[0]!r} failed "
                                     f"(exit {done.returncode})")
    text = done.stdout.decode("utf-8", "replace")
    passphrase = text.splitlines()[0] if text.splitlines() else ""
    if not passphrase:
        raise PassphraseSourceFailed(f"the passphrase command {argv[0]!r} printed nothing")
    return passphrase


def _ask(prompt: str, confirm: bool) -> str:
    import getpass
    if not sys.stdin.isatty():
        raise NoPassphrase("no passphrase: give --passphrase-file or --passphrase-command, "
                           "set FLUD_PASSPHRASE (or _FILE, _COMMAND), keep one in the OS "
                           "keyring with --remember, or run this in a terminal to be asked")
    first = getpass.getpass(prompt)
    if confirm and getpass.getpass("the same again: ") != first:
        raise PassphraseSourceFailed("the two passphrases differ; nothing was changed")
    return first


# ---- the OS keyring (the `keyring` package), where there is one ------------------

def _keyring(env):
    """The keyring module when a real backend is there, else None."""
    if env.get("FLUD_KEYRING", "1") == "0":
        return None
    try:
        import keyring
        backend = keyring.get_keyring()
    except Exception:   # no backend, a broken one, a D-Bus that does not answer
        return None
    module = type(backend).__module__
    if module.startswith(("keyring.backends.fail", "keyring.backends.null")):
        return None
    if module.startswith("keyring.backends.chainer") and not getattr(backend, "backends", ()):
        return None
    return keyring


def keyring_get(env=None):
    keyring = _keyring(os.environ if env is None else env)
    if keyring is None:
        return None
    try:
        return keyring.get_password(KEYRING_SERVICE, KEYRING_ENTRY)
    except Exception:
        return None


def keyring_set(passphrase: str, env=None) -> None:
    """Keep passphrase in the OS keyring; PassphraseSourceFailed where none."""
    keyring = _keyring(os.environ if env is None else env)
    if keyring is None:
        raise PassphraseSourceFailed("--remember: no OS keyring here (the `keyring` package "
                                     "found no backend); nothing was stored")
    try:
        keyring.set_password(KEYRING_SERVICE, KEYRING_ENTRY, passphrase)
    except Exception as err:
        raise PassphraseSourceFailed(f"--remember: the OS keyring refused: {err}") from None
