"""`flud restore --delete`: a restored directory made to hold what the
snapshot's holds, and nothing else.

Only inside a directory the restore walks (one the snapshot has, selected),
never DEST's own top level (what sits beside the snapshot's roots there is
not the snapshot's business) and never outside DEST: each directory is
opened from DEST name by name without following a symlink (destdir.py), and
a subdirectory is removed with shutil.rmtree relative to that descriptor
(which never follows a symlink either). A name the snapshot has but as
another kind (a directory where it has a file, or the reverse) goes too, so
the entry can be restored. A name the selection does not cover (excluded,
or not included) is left alone, as are the fixed temp names of a resumable
restore (overwrite.resume_temp), which the rerun still needs.

Runs on a pool thread: listing and removing touch the disk.
"""
import os
import re
import shutil
import stat

from flud.client.restore.file_writer import RestoreError

_RESUME_TEMP = re.compile(r"^\.r[0-9a-f]{24}\.flud-part$")


def delete_extra(dest, rel: str, kinds: dict, covers, dry: bool = False) -> tuple:
    """(deleted, failed) under DEST/rel: kinds maps each name the snapshot
    has there to whether it is a directory; covers(path, is_dir) says
    whether the selection reaches a path. deleted: [(path, is_dir)];
    failed: [(path, why)]. dry (--dry-run): listed, not deleted."""
    fd = dest.open_dir(rel)
    if fd is None:
        return [], []
    deleted, failed = [], []
    try:
        for name in sorted(os.listdir(fd)):
            if _RESUME_TEMP.match(name):
                continue
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            is_dir = stat.S_ISDIR(mode)
            if name in kinds and kinds[name] == is_dir:
                continue
            path = f"{rel}/{name}" if rel else name
            if not covers(path, is_dir):
                continue
            try:
                if dry:
                    pass
                elif is_dir:
                    shutil.rmtree(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError as err:
                failed.append((path, f"could not be deleted: {err.strerror or err}"))
                continue
            deleted.append((path, is_dir))
    finally:
        os.close(fd)
    return deleted, failed


def check_delete_target(dest: str, home: str) -> None:
    """RestoreError where --delete could take what must never go: DEST the
    filesystem's root, or DEST holding this client's own home (its key and
    index: a snapshot that excluded it would delete it)."""
    real = os.path.realpath(dest)
    if real == "/":
        raise RestoreError("--delete with DEST / is refused: restore into the directory "
                           "to make match the snapshot")
    home_real = os.path.realpath(home)
    if home_real == real or home_real.startswith(real.rstrip("/") + "/"):
        raise RestoreError(f"--delete is refused: DEST {dest} holds this client's home "
                           f"{home} (a snapshot without it would delete it)")
