"""Where a passphrase comes from (a file, a command, the environment, the OS
keyring), `flud key passwd`, and the key on paper typed back: the `flud`
command in this process (stdin is not a terminal), a test keyring backend
with the keyring package's interface. No node is started."""
import os
import sys
import types

import keyring
import pytest

from flud.cli.main import main
from tests.keyring_backend import FileKeyring

CLEAN = ("FLUD_PASSPHRASE", "FLUD_PASSPHRASE_FILE", "FLUD_PASSPHRASE_COMMAND",
         "FLUD_NEW_PASSPHRASE", "FLUD_KEYRING")


@pytest.fixture(autouse=True)
def no_keyring(monkeypatch):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    before = keyring.get_keyring()
    from keyring.backends import fail
    keyring.set_keyring(fail.Keyring())   # as on a machine without one
    yield
    keyring.set_keyring(before)


@pytest.fixture
def flud(monkeypatch, capsys):
    def run(*args, env=None):
        with monkeypatch.context() as patch:
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            code = main([str(a) for a in args])
        out = capsys.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
    return run


def output(proc) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"

OLD, NEW = "correct horse battery staple", "tr0ub4dor and 3 more"


@pytest.fixture
def home(tmp_path, flud):
    path = tmp_path / "home"
    proc = flud("init", "--home", path, "--join", "127.0.0.1:9")
    assert proc.returncode == 0, output(proc)
    return path


def imports(flud, tmp_path, key, name, *extra, env=None):
    proc = flud("init", "--home", tmp_path / name, "--import-key", key, "--join", "127.0.0.1:9",
                *extra, env=env)
    return proc


def same_key(home, other) -> bool:
    with open(os.path.join(home, "identity.pem"), "rb") as a, \
            open(os.path.join(other, "identity.pem"), "rb") as b:
        same_identity = a.read() == b.read()
    with open(os.path.join(home, "secret.key"), "rb") as a, \
            open(os.path.join(other, "secret.key"), "rb") as b:
        return same_identity and a.read() == b.read()


def test_passphrase_from_a_file_a_command_and_the_environment(home, tmp_path, flud):
    secret = tmp_path / "pass.txt"
    secret.write_text(OLD + "\nsecond line ignored\n")
    key = tmp_path / "key.flud"
    proc = flud("key", "export", "--home", home, key, "--passphrase-file", secret)
    assert proc.returncode == 0, output(proc)
    command = f"{sys.executable} -c \"print('{OLD}')\""
    proc = imports(flud, tmp_path, key, "a", "--passphrase-command", command)
    assert proc.returncode == 0, output(proc)
    assert same_key(home, tmp_path / "a")
    proc = imports(flud, tmp_path, key, "b", env={"FLUD_PASSPHRASE_FILE": str(secret)})
    assert proc.returncode == 0, output(proc)
    proc = imports(flud, tmp_path, key, "c", env={"FLUD_PASSPHRASE_COMMAND": "false"})
    assert proc.returncode == 2 and "'false' failed (exit 1)" in proc.stderr, output(proc)
    proc = imports(flud, tmp_path, key, "d", "--passphrase-file", tmp_path / "missing")
    assert proc.returncode == 2 and "cannot read the passphrase file" in proc.stderr


def test_key_passwd_rewraps_the_file_and_the_old_passphrase_no_longer_opens_it(home, tmp_path, flud):
    key = tmp_path / "key.flud"
    assert flud("key", "export", "--home", home, key, env={"FLUD_PASSPHRASE": OLD}).returncode == 0
    before = key.read_bytes()
    proc = flud("key", "passwd", key, env={"FLUD_PASSPHRASE": "wrong passphrase",
                                           "FLUD_NEW_PASSPHRASE": NEW})
    assert proc.returncode == 2 and "wrong passphrase" in proc.stderr, output(proc)
    assert key.read_bytes() == before                     # untouched
    proc = flud("key", "passwd", key, env={"FLUD_PASSPHRASE": OLD, "FLUD_NEW_PASSPHRASE": NEW})
    assert proc.returncode == 0, output(proc)
    assert key.read_bytes() != before and oct(key.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".key")] == []
    assert imports(flud, tmp_path, key, "old", env={"FLUD_PASSPHRASE": OLD}).returncode == 2
    assert imports(flud, tmp_path, key, "new", env={"FLUD_PASSPHRASE": NEW}).returncode == 0
    assert same_key(home, tmp_path / "new")


def test_the_os_keyring_keeps_the_passphrase_with_remember(home, tmp_path, flud):
    ring = {"FLUD_TEST_KEYRING": str(tmp_path / "ring.json")}
    key = tmp_path / "key.flud"
    proc = flud("key", "export", "--home", home, tmp_path / "k2", "--remember",
                env={"FLUD_PASSPHRASE": OLD})             # no keyring on this machine
    assert proc.returncode == 2 and "no OS keyring" in proc.stderr, output(proc)
    keyring.set_keyring(FileKeyring())
    proc = flud("key", "export", "--home", home, key, "--remember",
                env={**ring, "FLUD_PASSPHRASE": OLD})
    assert proc.returncode == 0, output(proc)
    proc = imports(flud, tmp_path, key, "a", env=ring)          # no passphrase given: the keyring's
    assert proc.returncode == 0, output(proc)
    proc = imports(flud, tmp_path, key, "b", env={**ring, "FLUD_KEYRING": "0"})
    assert proc.returncode == 2 and "no passphrase" in proc.stderr, output(proc)


def test_a_paper_key_typed_back_names_the_mistyped_line(home, tmp_path, flud):
    env = {"FLUD_PASSPHRASE": OLD}
    proc = flud("key", "export", "--home", home, "-", "--paper", env=env)
    assert proc.returncode == 0, output(proc)
    lines = [line for line in proc.stdout.splitlines() if line[:2].isdigit()]
    assert 10 <= len(lines) <= 14, proc.stdout
    typed = [line.lower() for line in lines]              # typed in any case
    wrong = typed[6][:5] + ("x" if typed[6][5] != "x" else "y") + typed[6][6:]
    (tmp_path / "typo.txt").write_text("\n".join(typed[:6] + [wrong] + typed[7:]))
    proc = flud("key", "import", "--paper", "--from", tmp_path / "typo.txt",
                tmp_path / "k", env=env)
    assert proc.returncode == 2 and "line(s) 07 do not match" in proc.stderr, output(proc)
    (tmp_path / "paper.txt").write_text(proc.stdout + "\n".join(typed))
    proc = flud("key", "import", "--paper", "--from", tmp_path / "paper.txt",
                tmp_path / "k", env=env)
    assert proc.returncode == 0, output(proc)
    assert imports(flud, tmp_path, tmp_path / "k", "a", env=env).returncode == 0
    assert same_key(home, tmp_path / "a")
    proc = imports(flud, tmp_path, tmp_path / "paper.txt", "b", env=env)   # init reads paper too
    assert proc.returncode == 0, output(proc)
    assert same_key(home, tmp_path / "b")


def test_a_paper_key_typed_on_a_terminal_asks_a_mistyped_line_again(home, tmp_path, flud,
                                                                    monkeypatch):
    env = {"FLUD_PASSPHRASE": OLD}
    proc = flud("key", "export", "--home", home, "-", "--paper", env=env)
    lines = [line for line in proc.stdout.splitlines() if line[:2].isdigit()]
    typo = lines[2][:4] + ("Z" if lines[2][4] != "Z" else "Y") + lines[2][5:]
    answers = iter([lines[0][4:], lines[1], typo[4:], lines[2][4:], *lines[3:]])
    asked = []

    def typed(prompt):
        asked.append(prompt)
        return next(answers)
    monkeypatch.setattr("builtins.input", typed)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    proc = flud("key", "import", "--paper", tmp_path / "k", env=env)
    assert proc.returncode == 0, output(proc)
    assert asked[:4] == ["line 01: ", "line 02: ", "line 03: ", "line 03: "]
    assert "line 03 does not match its checksum" in proc.stderr
    assert imports(flud, tmp_path, tmp_path / "k", "a", env=env).returncode == 0
    assert same_key(home, tmp_path / "a")


def test_a_file_that_is_no_key_at_all_is_named_as_such(home, tmp_path, flud):
    (tmp_path / "notes.txt").write_text("shopping list\nmilk\n")
    proc = imports(flud, tmp_path, tmp_path / "notes.txt", "a", env={"FLUD_PASSPHRASE": OLD})
    assert proc.returncode == 2 and "neither a key file" in proc.stderr, output(proc)


def test_a_passwd_that_dies_before_its_rename_leaves_the_old_file_whole(home, tmp_path, flud,
                                                                        monkeypatch):
    key = tmp_path / "key.flud"
    assert flud("key", "export", "--home", home, key, env={"FLUD_PASSPHRASE": OLD}).returncode == 0
    before = key.read_bytes()

    real_replace = os.replace

    def crash(source, target):   # the process dies between the fsync and the last rename
        if str(target) == str(key):
            raise KeyboardInterrupt
        return real_replace(source, target)
    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", crash)
        proc = flud("key", "passwd", key, env={"FLUD_PASSPHRASE": OLD,
                                               "FLUD_NEW_PASSPHRASE": NEW})
    assert proc.returncode == 130
    assert (tmp_path / ".key.flud.new").exists()          # the new one, written in full
    assert key.read_bytes() == before                    # the old file, whole
    assert imports(flud, tmp_path, key, "a", env={"FLUD_PASSPHRASE": OLD}).returncode == 0
    proc = flud("key", "passwd", key, env={"FLUD_PASSPHRASE": OLD, "FLUD_NEW_PASSPHRASE": NEW})
    assert proc.returncode == 0, output(proc)            # the leftover .new is written over
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")] == []
