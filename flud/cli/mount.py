"""`flud mount DIR`: the snapshots as a read-only file system (FUSE), in
the foreground of this process until it is unmounted (`fusermount3 -u DIR`,
or Ctrl-C here).

Two threads: libfuse's loop (mfusepy, its own threads) calls the
operations below, and each asks the Twisted reactor, which runs in a thread
of its own with the network, for the answer (blockingCallFromThread). What
the view is and how it reads lies in flud/client/restore/mount_view.py and
fileread.py; this is the glue. Nothing is written: a write, a create, a
chmod are refused with EROFS by the binding's defaults and `-o ro`.
"""
import errno
import itertools
import os
import sys
import threading

from flud.cli.exits import EXIT_ERROR, EXIT_OK

# The kernel keeps what it learnt of a path this long (seconds): a
# snapshot never changes, so `ls -R` and a second `cat` ask the view once.
KERNEL_CACHE_SECONDS = 300
READAHEAD = 4 * 1024 * 1024   # the kernel's read-ahead on a file (it caps it to its own)


def add_mount_command(sub) -> None:
    from flud.cli.client import _rate

    mount = sub.add_parser("mount", help="browse the snapshots as a read-only file system "
                                         "(FUSE): snapshots/ID/..., latest")
    mount.add_argument("dir", help="an empty directory to mount on")
    mount.add_argument("--home", required=True)
    mount.add_argument("--limit-download", type=_rate, default=0, metavar="RATE",
                       help="download at most RATE: KiB/s, or 500K, 10M (default: no limit)")
    mount.set_defaults(handler=cmd_mount)


def _fuse():
    """mfusepy, or a message that says what is missing."""
    if not os.path.exists("/dev/fuse"):
        return None, ("/dev/fuse is missing: this machine (or container) has no FUSE; "
                      "load the fuse module or run with --device /dev/fuse")
    try:
        import mfusepy
    except ImportError:
        return None, "the mfusepy package is missing: pip install mfusepy"
    except OSError as err:   # libfuse itself
        return None, (f"libfuse cannot be loaded ({err}): install it "
                      f"(Debian: apt-get install fuse3)")
    return mfusepy, None


def cmd_mount(args) -> int:
    from flud.cli.home import open_home

    fuse, missing = _fuse()
    if fuse is None:
        print(f"error: {missing}", file=sys.stderr)
        return EXIT_ERROR
    target = os.path.abspath(args.dir)
    if not os.path.isdir(target):
        print(f"error: {target} is not a directory", file=sys.stderr)
        return EXIT_ERROR
    home = open_home(args.home)
    if home is None:
        return EXIT_ERROR
    from twisted.internet import reactor
    from twisted.internet.threads import blockingCallFromThread

    loop = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False},
                            name="flud-reactor", daemon=True)
    loop.start()
    mounted = operations = None
    try:
        try:
            mounted = blockingCallFromThread(reactor, _open, reactor, home, args)
        except Exception as err:
            print(f"error: the snapshots cannot be read: {err}", file=sys.stderr)
            return EXIT_ERROR
        view, close = mounted
        print(f"mounting {len(view.snapshots)} snapshot(s) on {target} (read-only); unmount "
              f"with `fusermount3 -u {target}` or Ctrl-C", file=sys.stderr, flush=True)
        operations = type("FludOperations", (_Operations, fuse.Operations), {})(
            fuse, reactor, view)
        fuse.FUSE(operations, target, foreground=True, ro=True,
                  fsname="flud-snapshots", subtype="flud", default_permissions=True,
                  attr_timeout=KERNEL_CACHE_SECONDS, entry_timeout=KERNEL_CACHE_SECONDS,
                  kernel_cache=True)
    except RuntimeError as err:   # mfusepy: libfuse's loop ended with an error code
        if operations is not None and operations.mounted:
            # mounted, then ended by a signal (Ctrl-C, SIGTERM): libfuse unmounted
            print(f"unmounted {target}", file=sys.stderr)
            return EXIT_OK
        print(f"error: cannot mount on {target} (libfuse's reason above; code {err})",
              file=sys.stderr)
        return EXIT_ERROR
    finally:
        if mounted is not None:
            blockingCallFromThread(reactor, mounted[1])
        reactor.callFromThread(reactor.stop)
        loop.join(30)
        home.close()
    return EXIT_OK


def _open(reactor, home, args):
    """(MountView, close) on the reactor thread: the network found, the
    repository's map read, the snapshot records listed."""
    from twisted.internet import defer

    from flud.client.context import JobContext
    from flud.client.restore.file_ranges import FileReader
    from flud.client.repository.root_store import ManifestMissing
    from flud.client.restore.mount_view import MountView
    from flud.client.network import Network
    from flud.client.progress import Progress
    from flud.client.repository.snapshot_lookup import open_repository
    from flud.client.repository.tree_walk import TreeReader
    from flud.coding import SegmentCoder
    from flud.lean import proc_rss
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool

    pool = CPUPool(reactor, size=2)
    network = Network(reactor, home.path, home.bootstrap(),
                      download_limit=getattr(args, "limit_download", 0))
    ctx = JobContext(reactor, home, network, pool, MemoryMonitor(rss_reader=proc_rss),
                     Progress("mount", quiet=True),
                     SegmentCoder(home.config["k"], home.config["n"]))
    state = {}

    def close():
        if "repo" in state:
            state["repo"].close()
        network.close()
        pool.stop()

    @defer.inlineCallbacks
    def setup():
        try:
            yield network.discover()
            try:
                _, repo = yield open_repository(ctx, reading=True)
            except ManifestMissing as err:
                raise RuntimeError(str(err))
            if repo is None:
                raise RuntimeError("this repository has only version-1 snapshots: back up "
                                   "once with this flud to mount it")
            state["repo"] = repo
            records = yield repo.snapshots()
        except BaseException:
            close()
            raise
        view = MountView(records, TreeReader(repo.fetch_sealed, repo.sealer),
                         FileReader(ctx, repo))
        return view, close
    return setup()


class _Operations:
    """mfusepy's operations, each answered by the view on the reactor (mixed
    into mfusepy.Operations, whose defaults refuse every write with EROFS
    and leave the rest to libfuse)."""

    use_ns = True   # times in nanoseconds, as the snapshot keeps them

    def __init__(self, fuse, reactor, view):
        from twisted.internet.threads import blockingCallFromThread

        self._fuse = fuse
        self._call = lambda fn, *a: blockingCallFromThread(reactor, fn, *a)
        self.view = view
        self.uid, self.gid = os.getuid(), os.getgid()
        self.mounted = False
        self._open = {}   # file handle -> the opened file's node (reads skip the path)
        self._handles = itertools.count(1)

    def _ask(self, fn, *args):
        try:
            return self._call(fn, *args)
        except OSError as err:
            raise self._fuse.FuseOSError(err.errno or errno.EIO) from None
        except Exception as err:   # a fetch that failed: the reader sees EIO
            print(f"flud mount: {fn.__name__}{args[:1]}: {err}", file=sys.stderr, flush=True)
            raise self._fuse.FuseOSError(errno.EIO) from None

    def init_with_config(self, conn_info, config):
        """A sequential reader (cat, cp) gets the kernel reading ahead
        READAHEAD bytes: several reads in flight, the segments they touch
        fetched ahead (fileread.READ_AHEAD), instead of one 128 KiB round
        trip at a time."""
        self.mounted = True   # libfuse calls init once the file system is mounted
        if conn_info is not None:
            conn_info.max_readahead = READAHEAD

    def getattr(self, path, fh=None):
        return self._ask(self.view.node, path).attributes(self.uid, self.gid)

    def readdir(self, path, fh):
        return [".", ".."] + self._ask(self.view.list, path)

    def readlink(self, path):
        return self._ask(self.view.readlink, path)

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise self._fuse.FuseOSError(errno.EROFS)
        handle = next(self._handles)
        self._open[handle] = self._ask(self.view.open, path)
        return handle

    def read(self, path, size, offset, fh):
        node = self._open.get(fh)
        if node is None:
            return self._ask(self.view.read, path, offset, size)
        return self._ask(self.view.read_node, node, offset, size)

    def release(self, path, fh):
        self._open.pop(fh, None)
        return 0

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": 255}
