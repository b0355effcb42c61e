"""The key commands as a user runs them: `flud` in a subprocess, stdin not a
terminal, no FLUD_PASSPHRASE unless given. No node is started: `init
--join` only records the address."""
import os

import pytest

from tests.integration.helpers import flud, output

pytestmark = pytest.mark.integration

PASSPHRASE = {"FLUD_PASSPHRASE": "correct horse battery staple"}


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    proc = flud("init", "--home", path, "--join", "127.0.0.1:9")
    assert proc.returncode == 0, output(proc)
    return path


def assert_error(proc, *words):
    assert proc.returncode == 2, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)
    assert proc.stderr.startswith("error: "), output(proc)
    for word in words:
        assert word in proc.stderr, output(proc)


def test_no_passphrase_and_no_terminal_is_an_error_that_says_what_to_do(home, tmp_path):
    key = tmp_path / "key.flud"
    proc = flud("key", "export", "--home", home, key)  # stdin: /dev/null, no FLUD_PASSPHRASE
    assert_error(proc, "FLUD_PASSPHRASE", "terminal")
    assert not key.exists()

    proc = flud("key", "export", "--home", home, key, env=PASSPHRASE)
    assert proc.returncode == 0, output(proc)
    proc = flud("init", "--home", tmp_path / "new", "--import-key", key,
                "--join", "127.0.0.1:9")
    assert_error(proc, "FLUD_PASSPHRASE", "terminal")
    assert not (tmp_path / "new" / "config.json").exists()


def test_key_export_never_overwrites_a_file_unless_forced(home, tmp_path):
    key = tmp_path / "key.flud"
    key.write_bytes(b"something the user keeps")
    proc = flud("key", "export", "--home", home, key, env=PASSPHRASE)
    assert_error(proc, str(key), "--force")
    assert key.read_bytes() == b"something the user keeps"
    assert sorted(os.listdir(tmp_path)) == ["home", "key.flud"]  # no temp left behind

    proc = flud("key", "export", "--home", home, key, "--force", env=PASSPHRASE)
    assert proc.returncode == 0, output(proc)
    assert key.read_bytes() != b"something the user keeps"
    assert os.stat(key).st_mode & 0o777 == 0o600

    proc = flud("init", "--home", tmp_path / "new", "--import-key", key,
                "--join", "127.0.0.1:9", env=PASSPHRASE)
    assert proc.returncode == 0, output(proc)


def test_key_export_refuses_a_symlink_in_the_files_place(home, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs")
    key = tmp_path / "key.flud"
    os.symlink(target, key)
    proc = flud("key", "export", "--home", home, key, env=PASSPHRASE)
    assert_error(proc, "--force")
    assert target.read_bytes() == b"theirs" and os.path.islink(key)


def test_ls_of_a_directory_that_is_not_a_home_says_so(tmp_path):
    assert_error(flud("ls", "--home", tmp_path / "nowhere"), "not a flud client home")


def test_ls_of_a_new_home_lists_no_snapshots(home):
    proc = flud("ls", "--home", home)
    assert proc.returncode == 0, output(proc)
    assert "no snapshots" in proc.stdout
