"""write_private_file(replace=False): never over anything already there."""
import os

import pytest

from flud.keys import write_private_file


def test_a_new_file_is_written_private(tmp_path):
    path = tmp_path / "key.flud"
    write_private_file(path, b"secret", replace=False)
    assert path.read_bytes() == b"secret"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["key.flud"]


@pytest.mark.parametrize("what", ["file", "symlink", "dangling symlink"])
def test_anything_already_there_is_kept(tmp_path, what):
    path, target = tmp_path / "key.flud", tmp_path / "target"
    if what == "file":
        path.write_bytes(b"mine")
    else:
        if what == "symlink":
            target.write_bytes(b"theirs")
        os.symlink(target, path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileExistsError):
        write_private_file(path, b"secret", replace=False)
    assert sorted(os.listdir(tmp_path)) == before  # no temp file left
    if what == "file":
        assert path.read_bytes() == b"mine"
    elif what == "symlink":
        assert target.read_bytes() == b"theirs"
    else:
        assert not target.exists()


def test_replace_takes_the_name_not_the_link_target(tmp_path):
    path, target = tmp_path / "key.flud", tmp_path / "target"
    target.write_bytes(b"theirs")
    os.symlink(target, path)
    write_private_file(path, b"secret")
    assert not path.is_symlink() and path.read_bytes() == b"secret"
    assert target.read_bytes() == b"theirs"
