"""Keeping a node's static footprint small.

Twisted's compat module imports http.cookiejar, which drags in urllib.request,
http.client and the email package (3.6 MB of RSS measured here) that a node
never uses. importlib's LazyLoader creates the module object now and runs its
code only on first attribute access, so behaviour is unchanged if anything
ever does use it.

twisted.internet.defer imports asyncio for one function it calls
(iscoroutine) and two names it uses only in annotations: see
import_defer_without_asyncio.
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
    import_defer_without_asyncio()


_DEFER = "twisted.internet.defer"
_ASYNCIO_ANNOTATIONS = ("AbstractEventLoop", "Future")


class _AsyncioForDefer:
    """What `from asyncio import AbstractEventLoop, Future, iscoroutine` in
    twisted.internet.defer gets: the stdlib's own iscoroutine, and two names
    that module only uses in (postponed, never evaluated) annotations."""

    AbstractEventLoop = Future = None

    def __init__(self, iscoroutine):
        self.iscoroutine = iscoroutine


def _stdlib_iscoroutine():
    """asyncio.iscoroutine without importing the asyncio package: its
    coroutines.py, run on its own (not in sys.modules; it imports only collections.abc,
    inspect, os, sys, traceback and types, all loaded already)."""
    spec = importlib.util.find_spec("asyncio")  # a top-level spec: nothing runs
    path = spec.origin.rsplit("/", 1)[0] + "/coroutines.py"
    spec = importlib.util.spec_from_file_location("asyncio.coroutines", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.iscoroutine


def _defer_getattr(name):
    """Module __getattr__ for twisted.internet.defer: defer.Future and
    defer.AbstractEventLoop are asyncio's own, imported on first use."""
    if name in _ASYNCIO_ANNOTATIONS:
        import asyncio
        value = getattr(asyncio, name)
        setattr(sys.modules[_DEFER], name, value)
        return value
    raise AttributeError(f"module {_DEFER!r} has no attribute {name!r}")


def import_defer_without_asyncio() -> bool:
    """Import twisted.internet.defer without importing asyncio.

    defer does `from asyncio import AbstractEventLoop, Future, iscoroutine`;
    the asyncio package brings base_events, tasks, streams, subprocess,
    concurrent.futures and more that a node never runs: 1.4 MB of RSS per
    node (measured, fresh interpreter and forked testnet node alike). Only
    that one statement in defer is answered differently, through a wrapper
    around builtins.__import__ that exists while defer's body runs, so no
    other module sees anything but the real asyncio, and sys.modules never
    holds a stand-in: a later `import asyncio` is the real thing, and
    defer.Future / defer.AbstractEventLoop load it on first use. If anything
    fails, defer gets the real asyncio. Returns True if asyncio was avoided."""
    if _DEFER in sys.modules or "asyncio" in sys.modules:
        return False
    import builtins
    real_import = builtins.__import__
    try:
        stand_in = _AsyncioForDefer(_stdlib_iscoroutine())
    except Exception:
        stand_in = None

    def import_for_defer(name, globals=None, locals=None, fromlist=(), level=0):
        if (name == "asyncio" and not level and globals is not None
                and globals.get("__name__") == _DEFER):
            return stand_in
        return real_import(name, globals, locals, fromlist, level)

    if stand_in is not None:
        builtins.__import__ = import_for_defer
        try:
            import twisted.internet.defer  # noqa: F401
        except Exception:
            sys.modules.pop(_DEFER, None)  # importlib removes it already
        finally:
            builtins.__import__ = real_import
    defer = sys.modules.get(_DEFER)
    if defer is None:  # no stand-in, or the import failed with it
        import twisted.internet.defer as defer
        return False
    module_dict = vars(defer)
    if (all(module_dict.get(name, 0) is None for name in _ASYNCIO_ANNOTATIONS)
            and "__getattr__" not in module_dict):
        for name in _ASYNCIO_ANNOTATIONS:
            del module_dict[name]
        module_dict["__getattr__"] = _defer_getattr
        return True
    # Not the defer this was written for: give it what asyncio would have.
    import asyncio
    for name in (*_ASYNCIO_ANNOTATIONS, "iscoroutine"):
        module_dict[name] = getattr(asyncio, name)
    return False


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
