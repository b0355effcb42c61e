"""Keeping a node's static footprint small: modules a node never uses are
not loaded, without changing what any code sees.

defer_unused_imports() (every flud command, first thing) installs an import
hook that changes nothing until one of these modules is first imported:

- Lazy modules (LAZY_MODULES): the import gives a module object whose code
  runs on first use (any attribute but __spec__, __name__, __dict__).
  Twisted's compat module imports http.cookiejar, which drags in
  urllib.request, http.client and the email package (3.6 MB of RSS measured
  here); the others are listed with what they save.
- Modules imported sparing another (import_sparing): twisted.internet.defer
  imports asyncio for one function (iscoroutine) and two names used only in
  annotations; twisted.python.compat imports html for one deprecated alias
  (escape).

Figures are what each saves in an idle node's RSS, medians of 3, for a
node in its own interpreter and a node forked by `flud testnet up`, added
one after the other in the order below.
"""
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types

from flud import procfs

# name -> what leaving it unloaded saves per node (measured as above)
LAZY_MODULES = {
    "http.cookiejar": "3.6 MB (urllib.request, http.client, email)",
    # twisted.python.reflect does `import pickle`, for pickling functions;
    # nothing else in a node imports it since NodeService no longer
    # inherits twisted.application.service.Service (see flud/node/service.py)
    "pickle": "0.3-0.5 MB (pickle, _pickle, _compat_pickle)",
    # urllib.parse (through twisted.python.compat) imports it for bracketed
    # hosts in URLs
    "ipaddress": "0.15-0.25 MB",
    # shutil (through argparse) imports them to know they exist
    "bz2": "0.25-0.35 MB with lzma (bz2, lzma, their extensions and libraries)",
    "lzma": "see bz2",
    # twisted.internet.posixbase imports them for listenUDP, listenUNIX...
    "twisted.internet.udp": "0.15-0.25 MB with unix (udp, _multicast, unix, sendmsg)",
    "twisted.internet.unix": "see twisted.internet.udp",
    # flud.storage.disk imports it for the temporary files of uploads only
    "tempfile": "0.1-0.2 MB",
    # twisted.internet._signals and posixbase import it (with pty, tty,
    # termios) to reap and spawn child processes; a node spawns none.
    # traceback's linecache and textwrap: used only to format a traceback.
    # The three: 0.36 MB of a node's imports (medians of 4, fresh interpreters)
    "twisted.internet.process": "0.36 MB with tokenize and textwrap",
    "tokenize": "see twisted.internet.process",
    "textwrap": "see twisted.internet.process",
}

# Packages no flud process uses, kept out even where installed: pyOpenSSL
# (which magic-wormhole brings, through twisted[tls]) would be imported by
# twisted.internet.tcp, for startTLS, with cryptography and hashlib: 13 MB of
# RSS in every process, measured here (44 against 31 MB for the reactor and
# tcp alone). flud's TLS is its own (protocol/tls.py over libcrypto.py).
# `flud friends invite|accept` let it in for a wss:// mailbox (allow_package).
UNUSED_PACKAGES = ("OpenSSL",)

_LAZY = set()   # names the hook makes lazy
_PLANS = {}     # name -> (source, names, lazy): the hook imports it sparing source
_SPARED = {}    # name -> whether its import did spare source
_LAZY_LOCK = threading.RLock()
_LOADING = set()  # ids of lazy modules whose code runs now (under _LAZY_LOCK)
_PASS_THROUGH = frozenset(("__spec__", "__name__", "__dict__", "__class__"))


def defer_unused_imports() -> None:
    """Install the hook (cheap: nothing is imported now)."""
    for name in UNUSED_PACKAGES:
        sys.modules.setdefault(name, None)   # an import of it raises ImportError
    _LAZY.update(LAZY_MODULES)
    _install_hook()
    spare_on_import("twisted.python.compat", "html", {}, lazy=("escape",))
    spare_on_import("twisted.internet.defer", "asyncio", _defer_stand_ins,
                    lazy=("AbstractEventLoop", "Future"))


class _LazyModule(types.ModuleType):
    """A module whose code runs on first attribute access.

    Unlike importlib.util.LazyLoader (3.11), a plain `import name` of a
    module already in sys.modules does not load it (the import system only
    reads __spec__), and loading is thread-safe: another thread touching the
    module meanwhile waits until its code has run."""

    def __getattribute__(self, attr):
        if attr not in _PASS_THROUGH:
            _load(self)
        return types.ModuleType.__getattribute__(self, attr)

    def __setattr__(self, attr, value):
        if attr != "__class__":
            _load(self)
        types.ModuleType.__setattr__(self, attr, value)

    def __delattr__(self, attr):
        _load(self)
        types.ModuleType.__delattr__(self, attr)


def allow_package(name: str) -> None:
    """Let an UNUSED_PACKAGES package be imported after all."""
    if name in sys.modules and sys.modules[name] is None:
        del sys.modules[name]


def _load(module) -> None:
    with _LAZY_LOCK:
        if type(module) is not _LazyModule or id(module) in _LOADING:
            return  # loaded already, or its own code is running (this thread)
        _LOADING.add(id(module))
        try:
            module.__spec__.loader.exec_module(module)
        finally:
            _LOADING.discard(id(module))
        module.__class__ = types.ModuleType


def spare_on_import(module_name: str, source: str, names, lazy: tuple = ()) -> None:
    """Whenever module_name is first imported, import it sparing source (see
    import_sparing); names may be a callable that returns them, called then."""
    if module_name not in sys.modules:
        _PLANS[module_name] = (source, names, tuple(lazy))
    _install_hook()


def import_sparing(module_name: str, source: str, names, lazy: tuple = ()) -> bool:
    """Import module_name now without importing source: the statement
    `from source import ...` in module_name gets names[...] instead, and the
    names in lazy are then removed from the module and served by a module
    __getattr__ that imports source on first use (they must be used only
    through the module, not as globals by its own functions).

    Only that one module is answered differently, through a wrapper around
    builtins.__import__ that exists while its body runs: no other module
    sees anything but the real source, and sys.modules never holds a
    stand-in, so a later `import source` is the real thing. If anything
    fails, the module is run again the ordinary way. Returns True if source
    was spared; False if not (or if either was imported already)."""
    if module_name in sys.modules or source in sys.modules:
        return False
    spare_on_import(module_name, source, names, lazy)
    importlib.import_module(module_name)
    return _SPARED.pop(module_name, False)


class _Hook:
    """Meta path finder: for the names in _LAZY and _PLANS, the spec the
    other finders give, with its loader wrapped."""

    def find_spec(self, name, path=None, target=None):
        if name not in _LAZY and name not in _PLANS:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        if name in _PLANS:
            spec.loader = _SparingLoader(loader, name)
        elif loader.create_module(spec) is None:  # not for extension modules
            spec.loader = _LazyLoader(loader)
        return spec

    def invalidate_caches(self):
        pass


def _install_hook() -> None:
    if not any(isinstance(finder, _Hook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


class _WrappedLoader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return None

    def _unwrap(self, module):
        # from now on the module looks as if imported the ordinary way
        module.__spec__.loader = self.loader
        types.ModuleType.__setattr__(module, "__loader__", self.loader)


class _LazyLoader(_WrappedLoader):
    def exec_module(self, module):
        self._unwrap(module)
        module.__class__ = _LazyModule


class _SparingLoader(_WrappedLoader):
    def __init__(self, loader, name):
        super().__init__(loader)
        self.name = name

    def exec_module(self, module):
        self._unwrap(module)
        plan = _PLANS.pop(self.name, None)
        if plan is None:  # another spec of it was run already
            self.loader.exec_module(module)
            return
        _SPARED[self.name] = _exec_sparing(module, self.loader, self.name, *plan)


def _exec_sparing(module, loader, module_name, source, names, lazy) -> bool:
    if source in sys.modules:
        loader.exec_module(module)
        return False
    try:
        names = dict(names() if callable(names) else names)
        stand_in = types.SimpleNamespace(**names, **{name: None for name in lazy})
    except Exception:
        loader.exec_module(module)
        return False
    import builtins
    real_import = builtins.__import__

    def import_for(name, globals=None, locals=None, fromlist=(), level=0):
        if (name == source and not level and globals is not None
                and globals.get("__name__") == module_name):
            return stand_in
        return real_import(name, globals, locals, fromlist, level)

    module_dict = module.__dict__
    initial = dict(module_dict)
    builtins.__import__ = import_for
    try:
        loader.exec_module(module)
    except Exception:
        # It wants more from source than the stand-in has (or fails anyway):
        # run it again, the ordinary way.
        builtins.__import__ = real_import
        module_dict.clear()
        module_dict.update(initial)
        loader.exec_module(module)
        return False
    finally:
        builtins.__import__ = real_import
    if "__getattr__" in module_dict or not all(module_dict.get(name, 0) is None for name in lazy):
        # not the module this was written for: give it what source has
        real = importlib.import_module(source)
        for name in (*names, *lazy):
            module_dict[name] = getattr(real, name)
        return False
    for name in lazy:
        del module_dict[name]

    def __getattr__(name):
        if name in lazy:
            value = getattr(importlib.import_module(source), name)
            module_dict[name] = value
            return value
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    module_dict["__getattr__"] = __getattr__
    return True


def _defer_stand_ins() -> dict:
    return {"iscoroutine": _stdlib_iscoroutine()}


def _stdlib_iscoroutine():
    """asyncio.iscoroutine without the asyncio package: its coroutines.py, run
    on its own (not in sys.modules; in 3.11 it imports only collections.abc,
    inspect, os, sys, traceback and types)."""
    spec = importlib.machinery.PathFinder.find_spec("asyncio")
    path = spec.origin.rsplit("/", 1)[0] + "/coroutines.py"
    spec = importlib.util.spec_from_file_location("asyncio.coroutines", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.iscoroutine


# twisted.python.compat without html: 0.35-0.45 MB per node (html.entities'
# tables). compat imports html.escape only to offer it as a deprecated alias,
# compat.escape, which then imports html on first use.


def release_free_memory() -> None:
    """Hand memory freed during start-up back to the OS (glibc only)."""
    import gc
    gc.collect()
    trim_heap()


_LIBC = []  # glibc, loaded once (None where there is none)


def _libc():
    if not _LIBC:
        try:
            import ctypes
            libc = ctypes.CDLL("libc.so.6")
            libc.malloc_trim  # noqa: B018 - not glibc: no trim
        except (OSError, AttributeError):
            libc = None
        _LIBC.append(libc)
    return _LIBC[0]


def trim_heap() -> bool:
    """Give every free page of glibc's heap back to the OS, not only its top.

    The trim threshold (tune_malloc) only ever gives back the top of the
    heap. What a burst of short-lived objects leaves free below a survivor
    stays resident: 2,000 connections that completed TLS and never said
    HELLO took a node from 30 to 77 MB of RSS, and it stayed there once they
    were gone. malloc_trim(0) hands back the free pages wherever they are
    (madvise), at a cost that grows with the heap: call it after such a
    burst, not on a hot path. True if memory went back."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))


def proc_rss() -> int:
    """Resident set size from /proc/self/statm (flud/procfs.py): what psutil
    reads on Linux, without psutil's 4.9 MB import in every node; psutil
    only where there is no /proc."""
    try:
        return procfs.own_rss()
    except OSError:
        import psutil
        return psutil.Process().memory_info().rss


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Allocations from this size get their own mmap, and go back to the system
# when freed. The client keeps glibc's default: its small files, bundles and
# tars grow a bytearray at a time, and below the threshold they would grow
# through the heap and leave it in holes (a 4029-file home backed up at 95 MB
# peak RSS; 107 MB at 512 KiB, 120 MB at 1 MiB). Its hot buffers stay below
# it instead (outbound.SEND_WINDOW).
MMAP_THRESHOLD = 128 * 1024
# A node builds nothing that grows; what it makes and frees by the thousand
# is a RETRIEVE range read (448 KiB after the first piece), which as a fresh
# map cost ~110 page faults each time.
NODE_MMAP_THRESHOLD = 1024 * 1024
# Free memory at the top of the heap kept rather than given back: glibc's
# default (128 KiB) gave back, and faulted in again, the space of nearly
# every socket read and TLS record.
TRIM_THRESHOLD = 4 * 1024 * 1024
NODE_TRIM_THRESHOLD = 1024 * 1024  # a node's churn is smaller, its bound tighter


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD,
                trim_threshold: int = TRIM_THRESHOLD) -> None:
    """Fix glibc's two thresholds (measured figures in docs/DESIGN.md).

    Left to itself glibc raises its mmap threshold each time a large mapped
    block is freed, up to 32 MiB, and a heap fragmented by segment-sized
    blocks is never given back: a 128 MiB backup peaked at 61.7 MB RSS with
    the sliding threshold, 55.1 MB with it fixed. Fixed, every buffer above
    the threshold is a fresh map, zeroed and faulted in page by page, and
    with glibc's trim threshold the heap's top was given back and faulted in
    again all the time: ~500 page faults per MB backed up on the client,
    ~300 on the nodes, ~15% of each one's CPU. With these thresholds (and
    the client's joins kept below its threshold), ~8 and ~2."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        libc.mallopt(M_TRIM_THRESHOLD, trim_threshold)
    except (OSError, AttributeError):
        pass


# A node's interpreter runs with -OO: without docstrings, the code objects of
# Twisted and of the node's other imports take 0.7 MB less of its idle RSS
# (32.4 -> 31.7 MB, medians of 3, nodes in their own interpreters; 31.1 MB
# with the .opt-2.pyc files `make` compiles, which also start a node in
# 0.17 s instead of 0.27). flud keeps no check in an assert statement, and
# the whole test suite passes with PYTHONOPTIMIZE=2.
NODE_OPTIMIZE = 2


def node_interpreter_argv(flud_args: list) -> list:
    """The command that runs `flud FLUD_ARGS` in a node's lean interpreter."""
    return [sys.executable, "-" + "O" * NODE_OPTIMIZE, "-m", "flud", *flud_args]


def reexec_lean_node(flud_args: list) -> None:
    """Replace this process with a lean node interpreter (same pid, same
    environment), unless it already is one."""
    if sys.flags.optimize >= NODE_OPTIMIZE:
        return
    import os
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, node_interpreter_argv(flud_args))
