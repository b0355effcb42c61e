"""`flud backup --hooks` runs agent.toml's [hooks] around a backup by hand:
an essential before_backup that fails stops it, on_error sees the exit code.
No node is started: the home's only node address refuses connections."""
import socket

import pytest

from tests.integration.helpers import flud, output

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def home(tmp_path_factory):   # one home: each test writes its own agent.toml
    with socket.socket() as probe:          # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path_factory.mktemp("hooks") / "home"
    proc = flud("init", "--home", path, "--join", f"127.0.0.1:{port}")
    assert proc.returncode == 0, output(proc)
    return path


def hooks(home, tmp_path, before):
    with open(home / "agent.toml", "w") as f:
        f.write(f"[hooks]\nbefore_backup = '{before}'\n"
                f"on_error = 'echo \"$FLUD_JOB $FLUD_EXIT_CODE\" > {tmp_path}/error'\n")


def test_an_essential_before_backup_that_fails_stops_the_backup(home, tmp_path):
    hooks(home, tmp_path, "echo dump failed >&2; exit 4")
    proc = flud("backup", tmp_path, "--home", home, "--hooks")
    assert proc.returncode == 2, output(proc)
    assert "before_backup hook failed (exit 4): dump failed; the backup did not run" \
        in proc.stderr, output(proc)
    assert "no node answered" not in proc.stderr       # the backup never started
    assert (tmp_path / "error").read_text() == "backup \n"


def test_on_error_sees_the_failed_backups_exit_code(home, tmp_path):
    hooks(home, tmp_path, f"touch {tmp_path}/before")
    proc = flud("backup", tmp_path, "--home", home, "--hooks", "--json")
    assert proc.returncode == 2 and "no node answered" in proc.stderr, output(proc)
    assert (tmp_path / "before").exists()
    assert (tmp_path / "error").read_text() == "backup 2\n"
