"""Walking a tree directory by directory, each directory after its subdirectories.

A version-2 snapshot (docs/snapshots.md) is built bottom-up: a directory's
record names its subdirectories' records, so a directory is handed over once
everything below it has been. Only the directories on the current path are
open at any time, each with its listing: memory follows the depth and the
width of one directory, never the number of files in the tree.

What cannot be read is handed to on_skip(path, why) and left out, as the
whole-tree scan (scan.py) does; the two share their entry type and rules.
"""
import os
import stat
from dataclasses import dataclass
from typing import Callable, Iterator

from flud.client.backup.source_scan import Entry, list_children
from flud.client.records import DIRECTORY


@dataclass(slots=True)
class Directory:
    """One directory, once every directory below it was handed over.
    entries: its children (files, symlinks, directories), sorted by name."""
    path: str
    entry: Entry
    entries: list


def walk(root: str, excludes=(), on_skip: Callable = lambda path, why: None,
         list_children: Callable = list_children,
         skip: Callable = lambda path: False) -> Iterator[Directory]:
    """Every directory of the tree at root, each after all directories below
    it (post-order), ending with root itself. A root that is not a directory
    yields nothing (the caller records it as an entry of its own).
    list_children(path, excludes, on_skip): one directory's entries.
    skip(path): True for a subdirectory not to go into (an unchanged one
    whose record is known); it is neither listed nor handed over."""
    try:
        st = os.lstat(root)
    except OSError as err:
        on_skip(root, f"cannot read: {err.strerror}")
        return
    if not stat.S_ISDIR(st.st_mode):
        return
    top = Entry(root, DIRECTORY, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    # Each frame: the directory, its children, and the position of the next
    # subdirectory to descend into.
    stack = [(top, list_children(root, excludes, on_skip), 0)]
    while stack:
        entry, children, position = stack[-1]
        while position < len(children) and children[position].kind != DIRECTORY:
            position += 1
        if position < len(children):
            stack[-1] = (entry, children, position + 1)
            child = children[position]
            if not skip(child.path):
                stack.append((child, list_children(child.path, excludes, on_skip), 0))
            continue
        stack.pop()
        yield Directory(entry.path, entry, children)
