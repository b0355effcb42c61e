"""What tests of every kind share: a directory outside a restore's DEST."""
import os

import pytest


@pytest.fixture
def outside(tmp_path):
    """A directory a restore must never write into, holding one file."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious").write_bytes(b"not yours")
    return path


def everything_under(path) -> list:
    """Every path below path, relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(d, n), path)
                  for d, dirs, files in os.walk(path) for n in dirs + files)
