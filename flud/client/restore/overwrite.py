"""What a restore does with a name under DEST that is already taken
(`flud restore --overwrite`, restic's names for the same choices).

    never       the default: the file is restored beside what is there, as
                NAME.flud-restored (files.into_place); nothing is replaced,
                not even a name that appeared while the restore ran.
    always      every file is fetched and replaces what has its name.
    if-newer    a file is fetched and replaces what is there only if the
                snapshot's copy is newer (its mtime) than the one in place;
                a missing name is restored.
    if-changed  a file in place is read and checked against the content
                the snapshot recorded (its keyed content hash, the one the
                backup addressed it by; a large file segment by segment):
                one that matches is kept (its mode and times set), one that
                differs is replaced, fetching only its segments that differ.
                Size and mtime alone never decide: a file edited within
                the same second with the same length is still caught.

Every file that is written is still written to a temp name, made durable
and renamed into place in one step, so a killed restore never leaves a
half file under a final name. The temp names are fixed (resume_temp: made
from the file's name and its content id), in every mode, so a rerun after
a kill finds what the killed run wrote: under if-changed a small file whose
temp holds its whole content is renamed into place without a fetch, and a
large file's temp keeps every segment that landed whole; under the other
modes a temp is written anew. Either way none is left behind.

A directory in a file's place is never replaced: that file fails, named,
and the rest goes on. Anything else there (a symlink, a FIFO) is replaced
by the rename, never followed or opened.
"""
import errno
import threading

import blake3

from flud.client.restore.file_writer import RestoreError, TEMP_SUFFIX, into_place

NEVER, IF_CHANGED, IF_NEWER, ALWAYS = "never", "if-changed", "if-newer", "always"
MODES = (NEVER, IF_CHANGED, IF_NEWER, ALWAYS)


def resume_temp(name: str, content_id: str) -> str:
    """The fixed temp name of a file under if-changed: the same for the same
    name and content in any run, short whatever the name's length (a name
    may take all of NAME_MAX), and beside the numbered ones (`*.flud-part`)."""
    tag = blake3.blake3(f"{name}\0{content_id}".encode("utf-8", "surrogateescape"))
    return f".r{tag.hexdigest()[:24]}{TEMP_SUFFIX}"


class Overwrite:
    """One restore's policy for taken names; safe on the writer's threads.

    `replaced` counts the names whose old file the restore replaced."""

    def __init__(self, mode: str = NEVER):
        if mode not in MODES:
            raise RestoreError(f"--overwrite {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.replaced = 0
        self._lock = threading.Lock()

    @property
    def replaces(self) -> bool:
        """A taken name is replaced (not kept beside)."""
        return self.mode != NEVER

    @property
    def resumable(self) -> bool:
        """Temp names are fixed, and what a killed run wrote is used again."""
        return self.mode == IF_CHANGED

    @property
    def looks_first(self) -> bool:
        """What is in place is looked at before anything is fetched."""
        return self.mode in (IF_CHANGED, IF_NEWER)

    @staticmethod
    def temp_name(name: str, content_id: str) -> str:
        return resume_temp(name, content_id)

    def put(self, place, temp: str) -> bool:
        """The temp file `temp` under the entry's own name; True if it went
        beside what is there (never's NAME.flud-restored)."""
        if not self.replaces:
            return into_place(place, lambda name: place.rename_new(temp, name))[1]
        existed = place.exists()
        try:
            place.rename(temp, place.name)
        except (IsADirectoryError, NotADirectoryError):
            raise RestoreError(f"{place.rel}: a directory has its name in DEST; "
                               f"a restore never replaces a directory with a file") from None
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):   # the same, as others say it
                raise RestoreError(f"{place.rel}: a directory has its name in DEST") from None
            raise
        if existed:
            with self._lock:
                self.replaced += 1
        return False

    def put_symlink(self, place, target: str, temp_name: str) -> tuple:
        """(name, beside, kept) of a symlink restored at place: never's way
        (beside what is there), or made under temp_name and renamed over
        what is there; kept where the same link is already there."""
        if not self.replaces:
            name, beside = into_place(place, lambda name: place.symlink(target, name))
            return name, beside, False
        if place.link_target() == target:
            return place.name, False, True
        place.unlink(temp_name)
        place.symlink(target, temp_name)
        try:
            self.put(place, temp_name)
        except BaseException:
            place.unlink(temp_name)
            raise
        return place.name, False, False
