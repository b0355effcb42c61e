"""A home directory's metadata through a backup and a restore with real
node processes (issue 28, item 2): hard links, xattrs and ACLs (compared
with getfattr / getfacl), a 1 GiB file holding 4 KiB of data, a FIFO, a
device node and another user's file (as root), directories' own metadata;
a metadata-only change noticed without sending content again; a restore
onto a file system without xattrs restores the data and says what it could
not set.

getfattr/getfacl/setfacl come from Debian's `attr` and `acl` packages
(.ci/run installs them); the tests that need them skip without them.
"""
import json
import os
import shutil
import stat
import subprocess

import pytest

from tests.integration.helpers import flud, init_client, output, write_random

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
GIB = 1024 * MIB
NODES = 6
K, N = 2, 4
ROOT = os.geteuid() == 0
TOOLS = all(shutil.which(t) for t in ("getfattr", "setfattr", "getfacl", "setfacl"))
needs_tools = pytest.mark.skipif(
    not TOOLS, reason="getfattr/setfattr/getfacl/setfacl missing: "
                      "apt-get install attr acl (.ci/run does)")


def user_xattrs(where) -> None:
    """Skip where the tests' temporary directory has no user xattrs."""
    probe = where / "xattr-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.probe", b"1")
    except OSError as err:
        pytest.skip(f"no user xattrs under {where}: {err.strerror}")
    finally:
        probe.unlink()


@pytest.fixture(scope="module")
def net(module_testnet_factory):
    return module_testnet_factory(NODES, "home-meta-net")


def make_home(root):
    """The fixture home: what a real one holds besides plain files."""
    os.makedirs(root / "a")
    os.makedirs(root / "b")
    write_random(root / "a" / "one", 5000, 1)
    os.link(root / "a" / "one", root / "b" / "two")     # one file, two names
    write_random(root / "xattr.txt", 300, 2)
    os.setxattr(root / "xattr.txt", "user.note", b"kept")
    os.setxattr(root / "xattr.txt", "user.bin", bytes(range(256)))
    write_random(root / "acl.txt", 400, 3)
    subprocess.run(["setfacl", "-m", "u:nobody:r--,g:nogroup:rw-", root / "acl.txt"],
                   check=True)
    subprocess.run(["setfacl", "-d", "-m", "u:nobody:rwx", root / "b"], check=True)
    os.setxattr(root / "b", "user.dir", b"a directory's own")
    with open(root / "sparse.img", "wb") as f:           # 1 GiB, 4 KiB of data
        f.truncate(GIB)
        f.seek(512 * MIB)
        f.write(os.urandom(4096))
    with open(root / "vm.img", "wb") as f:    # its data over the small-file limit: in extents
        f.truncate(256 * MIB)
        f.write(os.urandom(MIB + 5))
        f.seek(100 * MIB + 4096)
        f.write(os.urandom(3 * MIB // 2))
    os.mkfifo(root / "pipe", 0o640)
    if ROOT:
        os.mknod(root / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        write_random(root / "theirs.txt", 100, 4)
        os.chown(root / "theirs.txt", 65534, 65534)      # nobody's
        os.chown(root / "a", 65534, 65534)
    os.chmod(root / "a", 0o750)
    os.utime(root / "a", ns=(1_600_000_000_000_000_000,) * 2)


def backup_json(home, src):
    proc = flud("backup", src, "--home", home, "--json", timeout=120)
    assert proc.returncode == 0, output(proc)
    return json.loads(proc.stdout.splitlines()[-1])


def dump(tool_args, root):
    """getfattr / getfacl of every path under root, paths relative."""
    proc = subprocess.run([*tool_args, "."], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_tools
def test_a_home_keeps_its_links_xattrs_acls_holes_and_special_files(net, tmp_path):
    user_xattrs(tmp_path)
    src = tmp_path / "home-src"
    make_home(src)
    home = tmp_path / "client"
    init_client(home, net, None, "--k", K, "--n", N)
    first = backup_json(home, src)
    # The 1 GiB file's holes are neither read nor sent: everything sent by
    # the whole backup (n/k times what is stored, tree records included).
    print(f"figures: first backup read {first['bytes_read']} B, sent {first['bytes_sent']} B")
    vm_data = MIB + 5 + 3 * MIB // 2
    assert first["bytes_read"] <= 1 * MIB + vm_data, first
    assert first["bytes_sent"] <= 1 * MIB + vm_data * N // K + 64 * 1024, first

    listing = flud("ls", "--home", home, "--snapshot", "1")
    assert listing.returncode == 0, output(listing)
    assert any(line.startswith("p 0640") and "pipe" in line
               for line in listing.stdout.splitlines()), output(listing)
    checked = flud("verify", "--home", home)
    assert checked.returncode == 0, output(checked)

    dest = tmp_path / "dest"
    proc = flud("restore", "--home", home, "--to", dest)
    assert proc.returncode == 0, output(proc)
    out = dest / "home-src"

    one, two = os.stat(out / "a" / "one"), os.stat(out / "b" / "two")
    assert (one.st_ino, one.st_nlink) == (two.st_ino, 2)
    assert open(out / "a" / "one", "rb").read() == open(src / "a" / "one", "rb").read()

    xattrs = ["getfattr", "-R", "-d", "-m", "-", "-e", "base64", "-P"]
    assert dump(xattrs, out) == dump(xattrs, src)
    assert "user.note" in dump(xattrs, src)
    acls = ["getfacl", "-R", "-P", "-n"]
    assert dump(acls, out) == dump(acls, src)
    assert "user:65534:r--" in dump(acls, out) and "default:user:65534:rwx" in dump(acls, out)

    img = os.stat(out / "sparse.img")
    print(f"figures: restored sparse.img uses {img.st_blocks * 512} B on disk")
    assert img.st_size == GIB and img.st_blocks * 512 <= 1 * MIB
    with open(out / "sparse.img", "rb") as f, open(src / "sparse.img", "rb") as g:
        for offset in (0, 512 * MIB - 10, 512 * MIB, GIB - 4096):
            f.seek(offset)
            g.seek(offset)
            assert f.read(8192) == g.read(8192)

    vm = os.stat(out / "vm.img")
    assert vm.st_size == 256 * MIB and vm.st_blocks * 512 <= 3 * MIB
    assert open(out / "vm.img", "rb").read() == open(src / "vm.img", "rb").read()

    assert stat.S_ISFIFO(os.lstat(out / "pipe").st_mode)
    assert stat.S_IMODE(os.lstat(out / "pipe").st_mode) == 0o640
    a = os.stat(out / "a")
    assert (stat.S_IMODE(a.st_mode), a.st_mtime_ns) == (0o750, 1_600_000_000_000_000_000)
    if ROOT:
        null = os.lstat(out / "null")
        assert stat.S_ISCHR(null.st_mode) and null.st_rdev == os.makedev(1, 3)
        assert (os.stat(out / "theirs.txt").st_uid, a.st_uid) == (65534, 65534)

    # A metadata-only change: a new record, no content sent again.
    os.chmod(src / "xattr.txt", 0o600)
    os.setxattr(src / "xattr.txt", "user.note", b"changed")
    write_random(src / "a" / "big-enough", 300_000, 5)
    backup_json(home, src)
    os.chmod(src / "a" / "big-enough", 0o604)
    os.setxattr(src / "a" / "big-enough", "user.tag", b"x")
    if ROOT:
        os.chown(src / "b", 65534, 65534)      # a directory's own owner
    third = backup_json(home, src)
    print(f"figures: metadata-only change sent {third['bytes_sent']} B, "
          f"read {third['bytes_read']} B")
    assert third["bytes_sent"] < 300_000, third   # its content (twice that, coded) not sent
    diff = flud("diff", "2", "3", "--home", home)
    assert "big-enough" in diff.stdout, output(diff)
    again = tmp_path / "again"
    proc = flud("restore", "--home", home, "--to", again)
    assert proc.returncode == 0, output(proc)
    changed = again / "home-src" / "a" / "big-enough"
    assert stat.S_IMODE(os.stat(changed).st_mode) == 0o604
    assert os.getxattr(changed, "user.tag") == b"x"
    assert os.getxattr(again / "home-src" / "xattr.txt", "user.note") == b"changed"
    if ROOT:
        assert os.stat(again / "home-src" / "b").st_uid == 65534


@pytest.fixture
def ramfs(tmp_path):
    """A file system without xattrs (ramfs), mounted for the test and
    unmounted after it."""
    where = tmp_path / "ramfs"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "none", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_restore_onto_a_file_system_without_xattrs_keeps_the_data_and_says_so(
        net, tmp_path, ramfs):
    user_xattrs(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    write_random(src / "tagged.txt", 700, 6)
    os.setxattr(src / "tagged.txt", "user.note", b"kept")
    write_random(src / "plain.txt", 800, 7)
    home = tmp_path / "client"
    init_client(home, net, None, "--k", K, "--n", N)
    backup_json(home, src)
    proc = flud("restore", "--home", home, "--to", ramfs, "--json")
    assert proc.returncode == 1, output(proc)     # restored, but not all of it
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["meta_not_set"] == 1, summary
    assert summary["not_set"][0]["path"] == "src/tagged.txt", summary
    assert "user.note" in summary["not_set"][0]["what"], summary
    for name in ("tagged.txt", "plain.txt"):
        assert open(ramfs / "src" / name, "rb").read() == open(src / name, "rb").read()
