"""A node process: one node in the foreground until SIGTERM or Ctrl-C, run
from a NodeConfig (`flud node run`, or forked by the testnet harness)."""
import logging
import os
import signal
import sys

from flud.node.config import NodeConfig

EXIT_CANNOT_LISTEN = 3


def setup_logging(home: str, verbose: bool = False) -> None:
    from twisted.logger import STDLibLogObserver, globalLogBeginner

    os.makedirs(home, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for handler in (logging.FileHandler(os.path.join(home, "node.log")),
                    logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        root.addHandler(handler)
    globalLogBeginner.beginLoggingTo([STDLibLogObserver()], redirectStandardIO=False)


def preload() -> None:
    """Import what a node needs, without installing a reactor: a launcher
    calls this once and then forks many nodes that share these pages."""
    from flud.lean import defer_unused_imports
    defer_unused_imports()
    import twisted.internet.epollreactor  # noqa: F401
    import flud.node.service  # noqa: F401
    import flud.storage.disk  # noqa: F401
    import flud.memory  # noqa: F401
    import flud.workers  # noqa: F401
    import flud.node.ready_signal  # noqa: F401
    # lazy in flud/lean.py, but every node parses addresses as it starts
    # (is_loopback, the routing table's subnets): loaded once here, shared
    import ipaddress
    ipaddress.ip_address("127.0.0.1")
    # Freeze what is loaded now: the collector then never walks these objects,
    # so a forked node does not copy the pages holding them (it writes GC
    # headers as it walks). Measured on a 50-node testnet: USS (private
    # memory) per node 15.3 -> 11.2 MB, RSS -0.1 MB. Collect first, or the
    # cyclic garbage of start-up would stay forever.
    import gc
    gc.collect()
    gc.freeze()


def run_forked(config: NodeConfig, stderr_path: str, ready=None, close=()) -> int:
    """Fork a node process; returns its pid (the child never returns).
    ready: (fd, index, want_contacts) for flud/node/ready_signal.py; close:
    the launcher's descriptors the child must not keep (the pipe's read end)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for fd in close:
            os.close(fd)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(err, 2)
        code = run(config, ready)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


def run(config: NodeConfig, ready=None) -> int:
    """Run config's node until it is stopped; returns the process's exit code.
    ready: (fd, index, want_contacts): tell the launcher on that pipe when
    the node listens and when it joined (flud/node/ready_signal.py)."""
    from flud.lean import (NODE_MMAP_THRESHOLD, NODE_TRIM_THRESHOLD, defer_unused_imports,
                           release_free_memory, tune_malloc)
    defer_unused_imports()
    tune_malloc(NODE_MMAP_THRESHOLD, NODE_TRIM_THRESHOLD)
    from twisted.internet import reactor
    from twisted.internet.error import CannotListenError

    from flud.node.service import NodeService

    setup_logging(config.home, config.verbose)
    log = logging.getLogger("flud.node")
    # Launchers may signal as soon as node.json says we listen, before the
    # reactor runs: Python's default SIGINT handler would then raise inside
    # the reactor's start-up, which logs it and runs on. A stop asked for
    # early is kept and honoured once the reactor runs. (Twisted leaves a
    # SIGINT handler that is not Python's default in place, and installs its
    # own for SIGTERM.)
    early_stop = [False]

    def on_stop_signal(signum, frame):
        if reactor.running:
            reactor.callFromThread(reactor.stop)
        else:
            early_stop[0] = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_stop_signal)
    reactor.callWhenRunning(lambda: early_stop[0] and reactor.stop())
    node = NodeService(reactor, config)
    try:
        node.startService()
    except CannotListenError as err:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, err.socketError)
        return EXIT_CANNOT_LISTEN
    log.info("node %s listening on %s:%d (pid %d)", node.node_id.hex()[:16], config.host,
             node.local.listen_port, os.getpid())
    if ready is not None:
        from flud.node.ready_signal import ReadySignal
        signal_ready = ReadySignal(*ready)
        signal_ready.listening(node.info)
        signal_ready.watch(node.discovery, reactor)
        reactor.addSystemEventTrigger("before", "shutdown", signal_ready.stop)
    reactor.addSystemEventTrigger("before", "shutdown", node.stopService)
    reactor.callLater(1.0, release_free_memory)
    profile_dir = os.environ.get("FLUD_PROFILE_DIR")
    if profile_dir:  # developers: one cProfile file per node, written at shutdown
        import cProfile
        import time
        # CPU time of the reactor thread: wall time would charge a node for
        # the time the other 49 processes held the CPU.
        profiler = cProfile.Profile(time.thread_time)
        profiler.runcall(reactor.run)
        profiler.dump_stats(os.path.join(profile_dir, f"node-{os.getpid()}.prof"))
    else:
        reactor.run()
    log.info("node stopped")
    return 0
