"""The parent's side of one load run: spawn client processes, start them
together, merge what they report, sample the nodes, reap every child.

Children are separate interpreters (`python -m tools.loadgen.child`), each
with a fresh identity in its own home under the run's work directory. They
write JSON lines to their stdout pipe; we read those from the reactor. Every
child is waited for by pid, with a timeout, and killed if it is late.
"""
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from twisted.internet import defer, task

from tools.loadgen import nodes as nodes_mod
from tools.loadgen.pipes import LineReader
from tools.loadgen.spec import OPS
from tools.loadgen.stats import Merged, read_samples

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTUP_TIMEOUT = 30.0   # interpreter start, identity, connecting to every node
POLL = 0.05
REAP_TIMEOUT = 5.0


@dataclass
class Plan:
    nodes: list
    sessions: list          # sessions per client process
    mix: dict
    size: str
    max_size: int = None
    delay: float = 0.0
    duration: float = 10.0
    ops: int = 10 ** 7
    seed: int = 1
    interval: float = 5.0
    warmup_objects: int = 4
    warmup_timeout: float = 120.0
    op_timeout: float = 60.0
    check: bool = True
    cleanup: bool = True
    cleanup_timeout: float = 60.0
    workdir: str = "/tmp"
    label: str = "run"
    on_interval: object = None      # callback(interval dict)
    extra: dict = field(default_factory=dict)

    def hard_limit(self) -> float:
        return (STARTUP_TIMEOUT + self.warmup_timeout + self.duration + self.op_timeout
                + self.cleanup_timeout + 30.0)


class Child:
    def __init__(self, index: int, proc, sessions: int):
        self.index = index
        self.proc = proc
        self.pid = proc.pid
        self.sessions = sessions
        self.ready = None
        self.connected = None
        self.result = None
        self.cleanup = None
        self.fatal = None
        self.ticks = {}
        self.eof = False
        self.exit_code = None
        self.killed = False

    def on_line(self, message: dict) -> None:
        kind = message.get("t")
        if kind == "tick":
            self.ticks[message["i"]] = message
        elif kind == "ready":
            self.ready = message
        elif kind == "connected":
            self.connected = message
        elif kind == "result":
            self.result = message
        elif kind == "cleanup":
            self.cleanup = message
        elif kind == "fatal":
            self.fatal = message.get("error", "failed")

    def on_eof(self) -> None:
        self.eof = True

    @property
    def gone(self) -> bool:
        if self.exit_code is None:
            self.exit_code = self.proc.poll()
        return self.eof and self.exit_code is not None

    def send(self, command: str) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": command}).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass


def _sleep(reactor, seconds: float):
    return task.deferLater(reactor, seconds, lambda: None)


class LoadRun:
    def __init__(self, reactor, plan: Plan, probe):
        self.reactor = reactor
        self.plan = plan
        self.probe = probe
        self.children = []
        self.interrupted = False
        self.intervals = []
        self.node_series = []   # (t, [stats])
        self._printed = 0
        self._go_at = None
        self.load_start = self.load_end = None   # the machine's 1-minute load average

    # ---- processes ------------------------------------------------------------

    def _spawn(self):
        plan = self.plan
        total_sessions = sum(plan.sessions)
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        budgets = _split(plan.ops, plan.sessions)
        for i, sessions in enumerate(plan.sessions):
            cfg = {
                "index": i, "sessions": sessions, "seed": f"{plan.seed}/{plan.label}/{i}",
                "nodes": [(n.node_id.hex(), n.host, n.port) for n in plan.nodes],
                "mix": plan.mix, "size": plan.size, "max_size": plan.max_size,
                "delay": plan.delay, "duration": plan.duration, "ops": budgets[i],
                "interval": plan.interval, "warmup_objects": plan.warmup_objects,
                "warmup_timeout": plan.warmup_timeout, "op_timeout": plan.op_timeout,
                "check": plan.check, "cleanup": plan.cleanup,
                "cleanup_timeout": plan.cleanup_timeout, "hard_limit": plan.hard_limit(),
                "home": os.path.join(plan.workdir, f"{plan.label}-client-{i}"),
                "samples_path": os.path.join(plan.workdir, f"{plan.label}-client-{i}.samples"),
                "total_sessions": total_sessions,
            }
            cfg_path = os.path.join(plan.workdir, f"{plan.label}-client-{i}.json")
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
            stderr = open(os.path.join(plan.workdir, f"{plan.label}-client-{i}.stderr"), "wb")
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tools.loadgen.child", cfg_path], cwd=ROOT, env=env,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                    start_new_session=True, close_fds=True)
            finally:
                stderr.close()
            child = Child(i, proc, sessions)
            LineReader(self.reactor, proc.stdout.fileno(), child.on_line, child.on_eof,
                       name=f"client {i}")
            self.children.append(child)

    def interrupt(self) -> None:
        """Ctrl-C: ask every child to stop now; the run still reports."""
        self.interrupted = True
        for child in self.children:
            child.send("stop")

    def reap(self) -> None:
        """Wait for every child by pid; SIGKILL the late ones. Blocking, bounded."""
        deadline = time.monotonic() + REAP_TIMEOUT
        for child in self.children:
            try:
                child.proc.stdin.close()
            except OSError:
                pass
        for child in self.children:
            while child.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(POLL)
            if child.proc.poll() is None:
                child.killed = True
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    child.proc.kill()
                child.proc.wait(timeout=REAP_TIMEOUT)
            child.exit_code = child.proc.returncode

    @defer.inlineCallbacks
    def _wait(self, done, timeout: float):
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            yield _sleep(self.reactor, POLL)
            self._print_ready_intervals()

    # ---- the run --------------------------------------------------------------

    @defer.inlineCallbacks
    def run(self):
        plan = self.plan
        os.makedirs(plan.workdir, exist_ok=True)
        self._spawn()
        try:
            yield self._wait(lambda: all(c.ready or c.fatal or c.gone for c in self.children),
                             STARTUP_TIMEOUT + plan.warmup_timeout)
            ready = [c for c in self.children if c.ready]
            if not ready:
                reasons = sorted({c.fatal or "did not start" for c in self.children})
                raise nodes_mod.NoReachableNode("no client process could start: " + "; ".join(reasons))
            first = yield self.probe.sample(plan.nodes)
            self.load_start = os.getloadavg()[0]
            started = time.monotonic()
            self.node_series.append((0.0, first))
            self._go_at = started
            for child in ready:
                child.send("go")
            sampler = task.LoopingCall(self._sample_nodes)
            sampler.start(plan.interval, now=False)
            try:
                yield self._wait(lambda: all(c.result or c.gone for c in ready),
                                 plan.duration + plan.op_timeout + 15.0)
            finally:
                sampler.stop()
            elapsed_wall = time.monotonic() - started
            last = yield self.probe.sample(plan.nodes)
            self.load_end = os.getloadavg()[0]
            self.node_series.append((elapsed_wall, last))
            self._print_ready_intervals(final=True)
            if plan.cleanup:
                yield self._wait(lambda: all(c.cleanup or c.gone for c in ready),
                                 plan.cleanup_timeout + 10.0)
            yield self._wait(lambda: all(c.gone for c in self.children), REAP_TIMEOUT)
        finally:
            self.reap()
        return self._report(first, last, elapsed_wall)

    @defer.inlineCallbacks
    def _sample_nodes(self):
        t = time.monotonic() - self._go_at
        stats = yield self.probe.sample(self.plan.nodes)
        self.node_series.append((t, stats))

    # ---- intervals --------------------------------------------------------------

    def _print_ready_intervals(self, final: bool = False) -> None:
        if self._go_at is None:
            return
        interval = self.plan.interval
        while True:
            k = self._printed
            have = [c for c in self.children if k in c.ticks]
            if not have:
                return
            waiting = [c for c in self.children if k not in c.ticks and c.ready
                       and not c.result and not c.gone]
            late = time.monotonic() - self._go_at > (k + 1) * interval + 2.0
            if waiting and not (late or final):
                return
            self.intervals.append(self._merge_interval(k, [c.ticks[k] for c in have]))
            if self.plan.on_interval is not None:
                self.plan.on_interval(self.intervals[-1])
            self._printed += 1

    def _merge_interval(self, k: int, ticks: list) -> dict:
        merged = {op: Merged() for op in OPS}
        for tick in ticks:
            for op, d in tick["ops"].items():
                merged[op].add_interval(d)
        span = max(t["span"] for t in ticks)
        end = k * self.plan.interval + span
        cpu, rss = self._node_cpu_near(end)
        return {"index": k, "t": round(end, 3), "span": round(span, 3),
                "ops": {op: m.summary(span) for op, m in merged.items() if m.ops or m.errors},
                "nodes_cpu_percent": cpu, "nodes_rss": rss}

    def _node_cpu_near(self, t: float):
        series = [s for s in self.node_series if s[0] <= t + 0.5]
        if len(series) < 2:
            return None, None
        (t0, a), (t1, b) = series[-2], series[-1]
        return nodes_mod.cpu_between(a, b, t1 - t0)

    # ---- the report ---------------------------------------------------------------

    def _report(self, first, last, elapsed_wall) -> dict:
        plan = self.plan
        ready = [c for c in self.children if c.ready]
        results = [c for c in ready if c.result]
        elapsed = max([c.result["elapsed"] for c in results] or [elapsed_wall])
        merged = {op: Merged() for op in OPS}
        for child in results:
            samples = read_samples(child.result["samples"])
            for op, d in child.result["ops"].items():
                merged[op].add_counts(d)
                if op in samples:
                    seen, lat, ttfb = samples[op]
                    merged[op].add_samples(seen, lat, ttfb)
        warm = Merged()
        warm_elapsed = 0.0
        for child in ready:
            d = child.ready["warmup"]["store"]
            warm.add_interval(d)
            warm_elapsed = max(warm_elapsed, child.ready["warmup_elapsed"])
        cleanup = Merged()
        for child in ready:
            if child.cleanup:
                cleanup.add_counts(child.cleanup["ops"]["delete"])
        total = Merged()
        for m in merged.values():
            total.add_counts({"ops": m.ops, "bytes_up": m.bytes_up, "bytes_down": m.bytes_down,
                              "lat_sum": 0.0, "ttfb_sum": 0.0, "errors": m.errors})
        node_rows = nodes_mod.node_rows(plan.nodes, first, last, elapsed_wall)
        clients = []
        for child in self.children:
            r = child.result or {}
            clients.append({
                "index": child.index, "pid": child.pid, "sessions": child.sessions,
                "cpu_percent": 100.0 * r["cpu_s"] / r["elapsed"] if r.get("elapsed") else None,
                "rss": r.get("rss"), "ops": sum(d["ops"] for d in r.get("ops", {}).values()),
                "exit_code": child.exit_code, "killed": child.killed, "fatal": child.fatal,
                "connected": (child.connected or {}).get("nodes"),
            })
        summary_total = total.summary(elapsed)
        del summary_total["latency_s"], summary_total["ttfb_s"]
        return {
            "label": plan.label,
            "elapsed_s": elapsed,
            "interrupted": self.interrupted,
            "ops": {op: m.summary(elapsed) for op, m in merged.items() if m.ops or m.errors},
            "total": summary_total,
            "warmup": dict(warm.summary(warm_elapsed), elapsed_s=warm_elapsed),
            "cleanup": {"ops": cleanup.ops, "errors": cleanup.errors,
                        "left": sum((c.cleanup or {}).get("left", 0) for c in ready)},
            "intervals": self.intervals,
            "nodes": node_rows,
            "node_series": self._node_series(),
            "nodes_missing_fields": nodes_mod.missing_fields(last),
            "clients": clients,
            "loadavg_1min": {"start": self.load_start, "end": self.load_end,
                             "cpus": os.cpu_count()},
        }


    def _node_series(self) -> list:
        out = []
        shortest = 0.5 * self.plan.interval
        kept = []
        for t, stats in self.node_series:
            if kept and t - kept[-1][0] < shortest:
                continue  # a sliver of a window gives a noisy CPU %
            kept.append((t, stats))
        for (t0, a), (t1, b) in zip(kept, kept[1:]):
            cpu, rss = nodes_mod.cpu_between(a, b, t1 - t0)
            out.append({"t": round(t1, 3), "cpu_percent": cpu, "rss": rss})
        return out


def _split(total: int, weights: list) -> list:
    """Share an op budget between processes in proportion to their sessions."""
    whole = sum(weights) or 1
    shares = [total * w // whole for w in weights]
    for i in range(total - sum(shares)):
        shares[i % len(shares)] += 1
    return shares
