"""Keeping a node's static footprint small.

Twisted's compat module imports http.cookiejar, which drags in urllib.request,
http.client and the email package (3.6 MB of RSS measured here) that a node
never uses. importlib's LazyLoader creates the module object now and runs its
code only on first attribute access, so behaviour is unchanged if anything
ever does use it.
"""
import importlib.util
import sys

LAZY_MODULES = ("http.cookiejar",)


def lazy_import(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        # `from parent import child` then finds the attribute and does not
        # go through the import system, which would touch (and load) it.
        setattr(importlib.import_module(parent), child, module)


def defer_unused_imports() -> None:
    for name in LAZY_MODULES:
        lazy_import(name)


def release_free_memory() -> None:
    """Hand memory freed during start-up back to the OS (glibc only)."""
    import gc
    gc.collect()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def proc_rss() -> int:
    """Resident set size from /proc/self/statm: what psutil reads on Linux,
    without psutil's 4.9 MB import in every node."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _page_size()
    except OSError:
        import psutil
        return psutil.Process().memory_info().rss


_PAGE = []


def _page_size() -> int:
    if not _PAGE:
        import os
        _PAGE.append(os.sysconf("SC_PAGE_SIZE"))
    return _PAGE[0]


M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def tune_malloc() -> None:
    """Keep large buffers (segments, shares, TLS pieces) in their own mmaps.

    glibc raises its mmap threshold each time a large mmapped block is freed,
    so after the first segment the 1 MiB buffers come from the heap, and a
    fragmented heap is never given back: measured here, a 128 MiB backup
    peaked at 61.7 MB RSS with the sliding threshold and 55.1 MB with it
    fixed at glibc's default of 128 KiB."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass
