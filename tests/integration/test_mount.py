"""`flud mount`: the snapshots as a read-only file system, from a real
testnet: the tree and every byte as backed up, a read by range in the middle
of a large file, writes refused, `latest`, and nothing left once unmounted.
Skipped, saying why, where FUSE is missing (/dev/fuse, fusermount3, libfuse)."""
import errno
import os
import shutil
import subprocess
import time

import pytest

from tests.integration.helpers import flud, flud_popen, init_client, output, write_random

pytestmark = pytest.mark.integration
MOUNT_TIMEOUT = 60.0


def fuse_or_skip():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse here (a container without FUSE): `flud mount` not tested")
    if shutil.which("fusermount3") is None:
        pytest.skip("no fusermount3: `apt-get install fuse3` (.ci/run installs it)")
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as err:
        pytest.skip(f"mfusepy or libfuse missing ({err}): pip install mfusepy; "
                    f"apt-get install fuse3")


def is_mounted(path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == str(path) for line in f)


class Mounted:
    """`flud mount` in its own process; unmounted and reaped at the end."""

    def __init__(self, home, target):
        self.target = target
        self.err = open(os.path.join(str(home), "mount-test.err"), "w+")
        self.proc = flud_popen("mount", target, "--home", home, stdout=subprocess.DEVNULL,
                               stderr=self.err)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not is_mounted(target):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                pytest.fail(f"flud mount did not mount: {self.stderr()}")
            time.sleep(0.1)

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-3000:]

    def unmount(self) -> int:
        subprocess.run(["fusermount3", "-u", str(self.target)], check=True, timeout=30)
        return self.proc.wait(30)

    def close(self) -> None:
        if is_mounted(self.target):
            subprocess.run(["fusermount3", "-u", "-z", str(self.target)], timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.err.close()


def test_mount_shows_every_snapshot_read_only(testnet_factory, tmp_path):
    fuse_or_skip()
    net = testnet_factory(6, "mount-net")
    home = tmp_path / "home"
    init_client(str(home), net, None, "--k", "2", "--n", "4")
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    for i in range(30):
        (src / "deep" / f"small-{i}.txt").write_text(f"file {i} " * (i + 1))
    (src / "deep" / "er" / "empty").write_bytes(b"")
    write_random(src / "big.bin", 5 * 1024 * 1024 + 12345, seed=11)
    # a large file that compresses: its segments are decompressed on the way
    (src / "text.log").write_bytes(b"".join(b"line %07d of a log that compresses\n" % i
                                            for i in range(100_000)))
    os.symlink("deep/small-3.txt", src / "link")
    for n in (1, 2):
        if n == 2:
            (src / "second.txt").write_text("only in the second snapshot")
        proc = flud("backup", src, "--home", home)
        assert proc.returncode == 0, output(proc)
    target = tmp_path / "mnt"
    target.mkdir()
    mounted = Mounted(home, target)
    try:
        assert sorted(os.listdir(target)) == ["latest", "snapshots"]
        assert sorted(os.listdir(target / "snapshots")) == ["1", "2"]
        assert os.readlink(target / "latest") == "snapshots/2"
        root = target / "latest" / "src"
        assert not (target / "snapshots" / "1" / "src" / "second.txt").exists()
        seen = []
        for directory, dirs, files in os.walk(root):
            rel = os.path.relpath(directory, root)
            for name in files:
                path = os.path.join(directory, name)
                original = os.path.join(src, rel, name)
                if os.path.islink(path):
                    assert os.readlink(path) == os.readlink(original)
                    continue
                with open(path, "rb") as a, open(original, "rb") as b:
                    assert a.read() == b.read(), path
                assert os.stat(path).st_mtime_ns == os.stat(original).st_mtime_ns
                seen.append(os.path.normpath(os.path.join(rel, name)))
        assert len(seen) == 30 + 4   # small, empty, big, text, second (the symlink aside)
        # a range in the middle of the large file, across a segment boundary
        with open(root / "big.bin", "rb") as f, open(src / "big.bin", "rb") as g:
            for offset in (2 * 1024 * 1024 - 7, 4 * 1024 * 1024 + 3):
                assert os.pread(f.fileno(), 100_000, offset) == \
                    os.pread(g.fileno(), 100_000, offset)
        with pytest.raises(OSError) as refused:
            open(root / "deep" / "small-1.txt", "w")
        assert refused.value.errno in (errno.EROFS, errno.EACCES)
        with pytest.raises(OSError) as refused:
            (root / "new").write_text("x")
        assert refused.value.errno in (errno.EROFS, errno.EACCES)
        assert mounted.unmount() == 0, mounted.stderr()
        assert not is_mounted(target)
    finally:
        mounted.close()
