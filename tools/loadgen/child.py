"""One client process: its own identity, reactor and connections; M sessions.

    python -m tools.loadgen.child CONFIG.json

Talks to the parent through its standard streams: JSON lines out (ready,
tick, result, cleanup, fatal), commands in (`go`, `stop`; end of input means
stop). It ignores SIGINT (the parent decides) and ends on its own after a
hard limit, so no child outlives a run.
"""
import json
import os
import random
import signal
import sys
import time

import blake3
from twisted.internet import defer, task
from twisted.python.failure import Failure

from flud import procfs
from flud.protocol.client import ClientNet, NodeAddress
from tools.loadgen.payload import Payloads
from tools.loadgen.pipes import LineReader, write_line
from tools.loadgen.session import Phase, Session
from tools.loadgen.spec import OPS, parse_size_dist
from tools.loadgen.stats import OpRecorder, write_samples

WATCHDOG = 0.25       # seconds between checks for ops over their timeout
TAIL_TICK = 0.2       # a last interval shorter than this share is left out of the series
DOWN_RETRY = 1.0      # after a failed dial, ops to that node fail fast this long
_now = time.perf_counter


class RunPhase(Phase):
    """The measured phase: draw ops from the mix until time or op budget runs out."""

    def __init__(self, worker, recorder, mix: dict, delay: float):
        super().__init__(recorder)
        self.w = worker
        self.delay = delay
        acc, table = 0.0, []
        for op in OPS:
            if op in mix:
                acc += mix[op]
                table.append((acc, op))
        self.table = table
        self.deadline = None

    def next_op(self, session):
        w = self.w
        if w.stopping or w.ops_left <= 0 or _now() >= self.deadline:
            return None
        w.ops_left -= 1
        u = session.rng.random()
        for edge, op in self.table:
            if u < edge:
                break
        if op != "store" and not session.objects:
            return "store"  # nothing to read, check or delete yet
        return op


class CountPhase(Phase):
    """Warm-up (store K objects) or clean-up (delete everything), time-bounded."""

    def __init__(self, worker, recorder, op: str, count: int, limit: float):
        super().__init__(recorder)
        self.w = worker
        self.op = op
        self.left = {}
        self.count = count
        self.deadline = _now() + limit

    def next_op(self, session):
        if self.w.stopping and self.op == "store" or _now() >= self.deadline:
            return None
        if self.op == "delete":
            return "delete" if session.objects else None
        left = self.left.get(session.index, self.count)
        if left <= 0:
            return None
        self.left[session.index] = left - 1
        return "store"


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _rss() -> int:
    try:
        return procfs.own_rss()
    except OSError:
        return 0


class Worker:
    def __init__(self, reactor, cfg: dict):
        self.reactor = reactor
        self.cfg = cfg
        self.nodes = [NodeAddress(bytes.fromhex(i), h, p) for i, h, p in cfg["nodes"]]
        self.node_count = len(self.nodes)
        seed = cfg["seed"]
        self.sizes = parse_size_dist(cfg["size"], cfg.get("max_size"))
        self.payloads = Payloads(str(seed).encode(), self.sizes.max_size)
        self.check = cfg["check"]
        self.new_hasher = blake3.blake3
        self.ops_left = cfg["ops"]
        self.stopping = False
        self.net = None
        self._conns = [None] * self.node_count
        self._down_until = [0.0] * self.node_count
        self._dialing = [None] * self.node_count
        stats_rng = random.Random(f"{seed}/samples")
        self.recorder = OpRecorder(OPS, stats_rng)
        self.warm = OpRecorder(("store",), stats_rng)
        self.clean = OpRecorder(("delete",), stats_rng)
        run_nonce = os.urandom(6)  # keys differ from run to run, even with one seed
        self.sessions = [Session(self, i, random.Random(f"{seed}/{i}"),
                                 run_nonce + i.to_bytes(2, "big"))
                         for i in range(cfg["sessions"])]
        self._go = defer.Deferred()
        self._tick = 0
        self._tick_start = 0.0

    # ---- talking to the parent ----------------------------------------------

    def emit(self, kind: str, **fields) -> None:
        fields["t"] = kind
        fields["child"] = self.cfg["index"]
        if not write_line(1, fields):
            self.stop()

    def on_command(self, message: dict) -> None:
        text = message.get("text", message.get("cmd", "")) if isinstance(message, dict) else ""
        if text.strip() == "go" and not self._go.called:
            self._go.callback(None)
        elif text.strip() == "stop":
            self.stop()

    def stop(self) -> None:
        self.stopping = True
        if not self._go.called:
            self._go.callback(None)

    # ---- connections ----------------------------------------------------------

    def connection(self, i: int):
        """A ready Connection, a Deferred for one, or None (node down a moment ago)."""
        conn = self._conns[i]
        if conn is not None and not conn.closed:
            return conn
        self._conns[i] = None
        if _now() < self._down_until[i]:
            return None
        waiter = defer.Deferred()
        waiting = self._dialing[i]
        if waiting is not None:
            waiting.append(waiter)
            return waiter
        self._dialing[i] = [waiter]
        node = self.nodes[i]
        # the pool's dial is bounded by TCP connect and handshake timeouts
        self.net.pool.get(node.node_id, node.host, node.port).addBoth(self._dialled, i)
        return waiter

    def _dialled(self, result, i: int) -> None:
        waiters, self._dialing[i] = self._dialing[i] or [], None
        failed = isinstance(result, Failure)
        if failed:
            self._down_until[i] = _now() + DOWN_RETRY
        else:
            self._conns[i] = result
        for waiter in waiters:
            if failed:
                waiter.errback(result)
            else:
                waiter.callback(result)

    # ---- the run --------------------------------------------------------------

    @defer.inlineCallbacks
    def run(self):
        cfg = self.cfg
        self.net = ClientNet(self.reactor, cfg["home"])
        hard = self.reactor.callLater(cfg["hard_limit"], self._give_up)
        watchdog = task.LoopingCall(self._watchdog)
        watchdog.start(WATCHDOG, now=False)
        try:
            yield self._connect_all()
            if self.stopping:
                return
            warm = CountPhase(self, self.warm, "store", cfg["warmup_objects"], cfg["warmup_timeout"])
            t = _now()
            cpu = _cpu_seconds()
            if cfg["warmup_objects"] > 0:
                yield defer.DeferredList([s.start(warm) for s in self.sessions])
            warm_elapsed = _now() - t
            self.emit("ready", warmup=self.warm.totals(with_samples=True),
                      warmup_elapsed=warm_elapsed, warmup_cpu_s=_cpu_seconds() - cpu,
                      objects=sum(len(s.objects) for s in self.sessions), pid=os.getpid())
            yield self._go
            yield self._measure()
            if cfg["cleanup"]:
                clean = CountPhase(self, self.clean, "delete", 0, cfg["cleanup_timeout"])
                t = _now()
                yield defer.DeferredList([s.start(clean) for s in self.sessions])
                self.emit("cleanup", ops=self.clean.totals(), elapsed=_now() - t,
                          left=sum(len(s.objects) for s in self.sessions))
        finally:
            watchdog.stop()
            if hard.active():
                hard.cancel()
            self.net.close()

    @defer.inlineCallbacks
    def _connect_all(self):
        waits = []
        for i in range(self.node_count):
            c = self.connection(i)
            waits.append(c if isinstance(c, defer.Deferred) else defer.succeed(c))
        results = yield defer.DeferredList(waits, consumeErrors=True)
        connected = sum(1 for ok, _ in results if ok)
        if not connected:
            reason = results[0][1].getErrorMessage() if results else "no nodes given"
            self.emit("fatal", error=f"no node reachable ({reason})")
            self.stopping = True
            return
        self.emit("connected", nodes=connected, of=self.node_count)

    @defer.inlineCallbacks
    def _measure(self):
        cfg = self.cfg
        phase = RunPhase(self, self.recorder, cfg["mix"], cfg["delay"])
        start = _now()
        phase.deadline = start + cfg["duration"]
        cpu = _cpu_seconds()
        self._tick_start = start
        ticker = task.LoopingCall(self._emit_tick)
        ticker.start(cfg["interval"], now=False)
        try:
            yield defer.DeferredList([s.start(phase) for s in self.sessions])
        finally:
            ticker.stop()
        elapsed = _now() - start
        if _now() - self._tick_start >= TAIL_TICK * cfg["interval"] or self._tick == 0:
            self._emit_tick()  # a stub of a tail would only show noisy rates
        path = cfg["samples_path"]
        write_samples(path, self.recorder.total_samples())
        self.emit("result", elapsed=elapsed, ops=self.recorder.totals(), samples=path,
                  cpu_s=_cpu_seconds() - cpu, rss=_rss(),
                  objects=sum(len(s.objects) for s in self.sessions))

    def _emit_tick(self) -> None:
        now = _now()
        self.emit("tick", i=self._tick, span=now - self._tick_start,
                  ops=self.recorder.take_interval(), cpu_s=_cpu_seconds(), rss=_rss())
        self._tick += 1
        self._tick_start = now

    def _watchdog(self) -> None:
        now = _now()
        limit = self.cfg["op_timeout"]
        for s in self.sessions:
            s.check_timeout(now, limit)

    def _give_up(self) -> None:
        self.emit("fatal", error=f"hard time limit of {self.cfg['hard_limit']:.0f} s reached")
        os._exit(3)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        cfg = json.load(f)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from flud.cli.runner import run_reactor

    def start(reactor):
        worker = Worker(reactor, cfg)
        LineReader(reactor, 0, worker.on_command, worker.stop, name="parent")
        return worker.run()

    try:
        run_reactor(start)
    except Exception as err:  # reported, never a traceback storm on the parent's screen
        write_line(1, {"t": "fatal", "child": cfg.get("index"), "error": f"{type(err).__name__}: {err}"})
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
