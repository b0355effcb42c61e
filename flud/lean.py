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
