"""Shared pieces of the flud benchmark suite (tools/bench).

- Testnet: `flud testnet up/down` as a context manager; its exit always stops
  the nodes and SIGKILLs any pid of testnet.json that is still the same process
  (flud/testnet/launch.py tells, by pid and start time).
- run() / flud(): a command with its wall time, CPU time and peak RSS (from
  wait4, i.e. the kernel's high-water mark of the child), stdout and stderr.
- parse_backup() / parse_restore(): the --json summary records flud prints.
- Row: one figure (samples, unit, target, anchor) and print_table().
- NoiseMeter: how much CPU *other* people's processes took while we measured.
- Data: random files, the seed's 51-file home mix, a >=4000-file home.

Units: MB = 10^6 bytes (as flud prints them), MiB = 2^20 bytes.
The bench scripts never import a reactor in the measuring process: anything
that talks to nodes runs in a subprocess (a Twisted reactor runs once per
process), e.g. `python tools/bench/common.py stats DIR`.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from flud import procfs  # noqa: E402
from flud.testnet import launch  # noqa: E402

_VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
PY = _VENV_PY if os.path.exists(_VENV_PY) else sys.executable
RUN_DIR = os.path.join(ROOT, "run", "bench")
OUT_DIR = os.path.join(HERE, "out")
GEN_MIX = os.path.normpath(os.path.join(ROOT, "..", "shared", "tools", "gen_mix.py"))
MIX_TOTAL = 3_200_000
MIX_FILES = 51

MB = 1e6
MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------- rows

@dataclass
class Row:
    """One figure. measured = median of samples; ok compares it with target."""
    figure: str
    samples: list = field(default_factory=list)
    unit: str = ""
    target: float | None = None
    sense: str | None = None  # ">=" or "<=" (what passes)
    anchor: str = ""
    note: str = ""
    bench: str = ""
    target_text: str | None = None  # overrides the printed target

    @property
    def measured(self):
        vals = [v for v in self.samples if v is not None and not math.isnan(v)]
        return statistics.median(vals) if vals else None

    @property
    def ok(self):
        m = self.measured
        if m is None or self.target is None or self.sense is None:
            return None
        return m >= self.target if self.sense == ">=" else m <= self.target

    def target_str(self) -> str:
        if self.target_text is not None:
            return self.target_text
        if self.target is None:
            return "-"
        return f"{'≥' if self.sense == '>=' else '≤'} {fmt(self.target)} {self.unit}".strip()

    def measured_str(self) -> str:
        m = self.measured
        if m is None:
            return "skipped" if not self.samples else "n/a"
        n = len(self.samples)
        s = f"{fmt(m)} {self.unit}".strip()
        if n > 1:
            s += f" (med of {n})"
        return s

    def as_dict(self) -> dict:
        return {"bench": self.bench, "figure": self.figure, "measured": self.measured,
                "samples": self.samples, "unit": self.unit, "target": self.target,
                "sense": self.sense, "target_text": self.target_str(), "anchor": self.anchor,
                "ok": self.ok, "note": self.note}


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 100):
        return f"{int(v):,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2g}"


def ok_str(ok) -> str:
    return {True: "ok", False: "MISS", None: "-"}[ok]


def save_table(name: str, rows, title: str) -> None:
    """The table of a bench run in out/NAME.txt."""
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, f"{name}.txt"), "w") as f:
        print_table(rows, title=title, out=f)


def print_table(rows: list, title: str = "", out=None, notes: bool = True,
                heading_rows: bool = False) -> str:
    """One aligned table: figure | measured | target | anchor | ok, then notes.
    With heading_rows, rows marked _heading print only their figure."""
    out = out or sys.stdout
    head = ("figure", "measured (median of N)", "target", "anchor", "ok")

    def cells(r):
        if heading_rows and getattr(r, "_heading", False):
            return (r.figure, "", "", "", "")
        return (r.figure, r.measured_str(), r.target_str(), r.anchor or "-", ok_str(r.ok))
    body = [cells(r) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    lines = []
    if title:
        lines.append(title)
    lines.append(" | ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    lines.append("-+-".join("-" * w for w in widths))
    for b in body:
        lines.append(" | ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip())
    if notes:
        noted = [(i, r) for i, r in enumerate(rows) if r.note]
        if noted:
            lines.append("")
            lines.append("notes:")
            for _, r in noted:
                lines.append(f"  - {r.figure}: {r.note}")
    text = "\n".join(lines)
    print(text, file=out, flush=True)
    return text


def median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def save_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, default=str)
    os.replace(tmp, path)


# ----------------------------------------------------------------------- commands

@dataclass
class CmdResult:
    argv: list
    rc: int
    stdout: str
    stderr: str
    wall: float
    cpu: float  # user + system seconds of the child and its waited-for descendants
    maxrss: int  # bytes: peak RSS of the child (kernel high-water mark)
    pid: int = 0

    def check(self, what: str = "") -> "CmdResult":
        if self.rc not in (0,):
            raise BenchError(f"{what or ' '.join(self.argv[:6])} exited {self.rc}:\n"
                             f"{self.stdout[-2000:]}\n{self.stderr[-2000:]}")
        return self


class BenchError(Exception):
    pass


def run(argv: list, timeout: float | None = None, env: dict | None = None, cwd: str = ROOT,
        on_start=None) -> CmdResult:
    """Run a command to its end; wall time, CPU and peak RSS come from wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env)
        if on_start:
            on_start(proc)
        timer = None
        if timeout:
            def kill():
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            timer = threading.Timer(timeout, kill)
            timer.daemon = True
            timer.start()
        try:
            while True:
                try:
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                except InterruptedError:
                    continue
        except BaseException:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            raise
        finally:
            if timer:
                timer.cancel()
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return CmdResult(list(argv), proc.returncode, out.read().decode(errors="replace"),
                         err.read().decode(errors="replace"), wall,
                         usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, proc.pid)


def flud(*args, timeout: float | None = 3600, env=None) -> CmdResult:
    return run([PY, "-m", "flud", *map(str, args)], timeout=timeout, env=env)


_UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def _bytes(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit]


def summary_record(text: str, command: str) -> dict:
    """The --json summary line of `command` in text (its last line; run the
    command with --json), or {} when there is none (the command did not end
    with one: killed, or run without --json)."""
    lines = text.strip().splitlines()
    try:
        record = json.loads(lines[-1]) if lines else None
    except ValueError:
        return {}
    if isinstance(record, dict) and record.get("type") == "summary" \
            and record.get("command") == command:
        return record
    return {}


def json_lines(text: str, kind: str) -> list:
    """The --json lines of one kind ("status", "error") in text, in order."""
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == kind:
            found.append(record)
    return found


def memory_of(record: dict) -> dict:
    """A --json summary's memory (flud/cli/results.py MemoryResult) as the
    figures the benchmarks print: {} when the summary has none."""
    if not record.get("memory"):
        return {}
    from flud.cli.results import MemoryResult
    memory = MemoryResult.from_summary(record)
    return {"peak_transfer": memory.peak_transfer_bytes, "peak_rss": memory.peak_rss,
            "static_rss": memory.static_rss}


def parse_backup(text: str) -> dict:
    """A backup's result, from its --json summary line's typed record
    (flud/cli/results.py); {} when the output has none."""
    record = summary_record(text, "backup")
    if not record:
        return {}
    from flud.cli.results import BackupResult
    done = BackupResult.from_summary(record)
    return {"snapshot": done.snapshot, "files": done.files, "new": done.new,
            "changed": done.changed, "unchanged": done.unchanged, "skipped": done.skipped,
            "read": done.bytes_read, "sent": done.bytes_sent, "stores": done.stores,
            "tars": done.tars, "elapsed": done.elapsed, **memory_of(record)}


def parse_restore(text: str) -> dict:
    """A restore's result, from its --json summary line's typed record
    (flud/cli/results.py); {} when the output has none."""
    record = summary_record(text, "restore")
    if not record:
        return {}
    from flud.cli.results import RestoreResult
    done = RestoreResult.from_summary(record)
    return {"snapshot": done.snapshot, "files": done.files, "dirs": done.dirs,
            "bytes": done.bytes, "elapsed": done.elapsed,
            "retrieves": done.retrieves + done.record_retrieves, **memory_of(record)}


def parse_prune(text: str) -> dict:
    """What a `flud prune --json` (or `forget --prune --json`) did, from its
    summary's typed record (flud/cli/results.py PruneResult): what the kept
    snapshots reach (bytes in bundles and in extents, each once, before n/k),
    what was deleted and freed, and the run's memory (peak and static RSS)."""
    record = summary_record(text, "prune") or summary_record(text, "forget")
    out = memory_of(record)
    if not record.get("prune"):
        return out
    from flud.cli.results import PruneResult
    done = PruneResult.from_summary(record["prune"])
    out.update(reach_bundles=done.live_bytes, reached_bundle_bytes=done.reached_bundle_bytes,
               mostly_dead_bundles=done.mostly_dead_bundles,
               reach_extents=done.live_extent_bytes,
               reached=done.live_bytes + done.live_extent_bytes, deleted=done.deleted,
               shares_deleted=done.shares_deleted, freed=done.bytes_freed,
               pending=done.pending, repacked_members=done.repacked_members,
               repacked_bundles=done.repacked_bundles)
    return out


# ------------------------------------------------------------------------ testnet

class Testnet:
    """`with Testnet(dir, 50) as tn:` starts it; leaving always stops it."""

    def __init__(self, directory: str, nodes: int, memory_log: bool = False,
                 spawn: str | None = None, fresh: bool = True, timeout: float = 180,
                 noise: "NoiseMeter | None" = None):
        self.dir = os.path.abspath(directory)
        self.count = nodes
        self.memory_log = memory_log
        self.spawn = spawn
        self.fresh = fresh
        self.timeout = timeout
        self.noise = noise
        self.nodes: list = []
        self.up_result: CmdResult | None = None
        self.up_reported: float | None = None

    def __enter__(self) -> "Testnet":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> float:
        if self.fresh and os.path.exists(self.dir):
            self._stop_leftovers()
            shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(os.path.dirname(self.dir), exist_ok=True)
        argv = ["testnet", "up", "--nodes", str(self.count), "--dir", self.dir,
                "--timeout", str(int(self.timeout)), "--json"]
        if self.memory_log:
            argv.append("--memory-log")
        if self.spawn:
            argv += ["--spawn", self.spawn]
        self.up_result = flud(*argv, timeout=self.timeout + 30)
        self.nodes = self._load()
        if self.noise:
            self.noise.track([n["pid"] for n in self.nodes])
        if self.up_result.rc != 0:
            raise BenchError(f"testnet up failed ({self.up_result.rc}):\n"
                             f"{self.up_result.stdout}\n{self.up_result.stderr}")
        self.up_reported = summary_record(self.up_result.stdout, "testnet up").get("seconds")
        return self.up_result.wall

    def _load(self) -> list:
        try:
            return launch.load(self.dir)["nodes"]
        except (OSError, ValueError, KeyError):
            return []

    def pids(self) -> list:
        return [n["pid"] for n in self.nodes]

    def stats(self) -> list:
        """STATS of every node ([dict or None]), asked from a subprocess."""
        r = run([PY, os.path.abspath(__file__), "stats", self.dir], timeout=60)
        if r.rc != 0:
            raise BenchError(f"stats failed: {r.stderr[-1500:]}")
        return json.loads(r.stdout)

    def bytes_stored(self) -> int:
        return sum(s["store"]["bytes_stored"] for s in self.stats() if s)

    def down(self) -> None:
        if self.noise:
            self.noise.sample()
        try:
            if os.path.exists(launch.testnet_file(self.dir)):
                flud("testnet", "down", "--dir", self.dir, timeout=60)
        finally:
            self._stop_leftovers()

    def _stop_leftovers(self) -> None:
        nodes = self._load() or self.nodes
        alive = launch.signal_all([(n["pid"], n.get("start")) for n in nodes], signal.SIGKILL)
        if alive:
            print(f"  (SIGKILLed {len(alive)} leftover node process(es) of {self.dir})",
                  file=sys.stderr)

    def remove(self) -> None:
        """Delete the testnet's data (after down)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def kill_pid(proc) -> None:
    """Stop a Popen we started: SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    launch.stop_process(proc, signal.SIGTERM, timeout=10, kill_timeout=10)


# ----------------------------------------------------------------------- homes

def new_home(path: str, testnet: str, k: int | None = None, n: int | None = None,
             segment_size: int | None = None, small_file_limit: int | None = None) -> str:
    shutil.rmtree(path, ignore_errors=True)
    argv = ["init", "--home", path, "--testnet", testnet]
    if k:
        argv += ["--k", k]
    if n:
        argv += ["--n", n]
    if segment_size:
        argv += ["--segment-size", segment_size]
    flud(*argv, timeout=120).check("flud init")
    if small_file_limit is not None:
        cfg_path = os.path.join(path, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["small_file_limit"] = small_file_limit
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
    return path


def home_config(path: str) -> dict:
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)


# ------------------------------------------------------------------------- data

def random_file(path: str, size: int, chunk: int = 4 * MiB) -> str:
    """A file of random bytes, kept between runs when its size already matches."""
    stamp = os.path.join(RUN_DIR, "stamps", os.path.abspath(path).replace("/", "_") + ".ok")
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    if os.path.exists(path) and os.path.exists(stamp) and os.path.getsize(path) == size:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
    open(stamp, "w").close()
    return path


def have_gen_mix() -> bool:
    return os.path.exists(GEN_MIX)


def gen_mix(dest: str, seed: int | None = None) -> str:
    """The seed's 51-file, 3,200,000-byte home mix (shared/tools/gen_mix.py)."""
    if not have_gen_mix():
        raise BenchError(f"{GEN_MIX} is missing")
    stamp = dest.rstrip("/") + ".ok"  # beside it: a file inside would be backed up
    if os.path.exists(stamp) and os.path.isdir(dest):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    argv = [PY, GEN_MIX, dest] + ([str(seed)] if seed is not None else [])
    run(argv, timeout=120).check("gen_mix")
    open(stamp, "w").close()
    return dest


def gen_home(dest: str, min_files: int = 4000) -> tuple:
    """>= min_files files in the seed's home mix: gen_mix.py with one seed per
    sub-directory (51 files, 3.2 MB each). Returns (files, bytes, dest)."""
    copies = math.ceil(min_files / MIX_FILES)
    stamp = dest.rstrip("/") + f".ok{copies}"
    if not (os.path.exists(stamp) and os.path.isdir(dest)):
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        for i in range(copies):
            run([PY, GEN_MIX, os.path.join(dest, f"part{i:03d}"), str(1000 + i)],
                timeout=120).check("gen_mix")
        open(stamp, "w").close()
    files, total = tree_size(dest)
    return files, total, dest


def tree_size(path: str) -> tuple:
    files = total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            files += 1
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return files, total


# ------------------------------------------------------------------------ noise

class NoiseMeter:
    """CPU used by processes that are not ours while a bench runs.

    ours = this process + its waited-for children (getrusage) + the node
    processes we started (sampled with psutil once a second: they are not our
    children after the launcher exits). others = machine busy time - ours.
    """

    def __init__(self):
        import psutil
        self._psutil = psutil
        self._tracked: dict = {}  # pid -> [first_cpu, last_cpu, proc]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.result: dict = {}

    def track(self, pids) -> None:
        with self._lock:
            for pid in pids:
                if pid in self._tracked:
                    continue
                try:
                    p = self._psutil.Process(pid)
                    t = p.cpu_times()
                    cpu = t.user + t.system
                except Exception:
                    continue
                # started just now by us: count all its CPU
                self._tracked[pid] = [0.0, cpu, p]

    def sample(self) -> None:
        with self._lock:
            for pid, entry in self._tracked.items():
                try:
                    t = entry[2].cpu_times()
                    entry[1] = max(entry[1], t.user + t.system)
                except Exception:
                    pass

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def _ours(self) -> float:
        s = os.times()
        return s.user + s.system + s.children_user + s.children_system

    def __enter__(self) -> "NoiseMeter":
        self.t0 = time.monotonic()
        self.busy0, self.total0 = procfs.machine_cpu_ticks()
        self.ours0 = self._ours()
        self.load0 = os.getloadavg()[0]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        wall = max(time.monotonic() - self.t0, 1e-9)
        busy1, total1 = procfs.machine_cpu_ticks()
        hz = os.sysconf("SC_CLK_TCK")
        busy = (busy1 - self.busy0) / hz
        ours = self._ours() - self.ours0 + sum(e[1] - e[0] for e in self._tracked.values())
        others = max(busy - ours, 0.0)
        self.result = {"wall_s": round(wall, 1), "machine_busy_cores": round(busy / wall, 2),
                       "ours_cores": round(ours / wall, 2),
                       "others_cores": round(others / wall, 2),
                       "cpus": os.cpu_count(), "loadavg_start": round(self.load0, 2),
                       "loadavg_end": round(os.getloadavg()[0], 2)}

    def text(self) -> str:
        r = self.result
        return (f"{r['wall_s']} s; machine busy {r['machine_busy_cores']} of {r['cpus']} cores, "
                f"ours {r['ours_cores']}, others {r['others_cores']}; load avg "
                f"{r['loadavg_start']} -> {r['loadavg_end']}")


# ------------------------------------------------------------------- arguments

def add_common_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, 1 repetition (smoke test)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions per figure (default 3; 1 with --quick)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="testnet size (default 50; 12 with --quick)")


def resolve_common(args) -> None:
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.nodes is None:
        args.nodes = 12 if args.quick else 50


def bench_main(module_name: str, add_arguments, run_bench, doc: str) -> int:
    """Entry point shared by bench_*.py: parse, run, print, write out/NAME.json."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_arguments(parser)
    add_arguments(parser)
    args = parser.parse_args()
    resolve_common(args)
    with NoiseMeter() as noise:
        args.noise = noise
        rows = run_bench(args)
    del args.noise
    for r in rows:
        r.bench = r.bench or module_name
    print()
    print_table(rows, title=f"{module_name} ({'quick' if args.quick else 'full'}, "
                            f"repeat {args.repeat})")
    print(f"\nnoise: {noise.text()}")
    save_json(os.path.join(OUT_DIR, f"{module_name}.json"),
              {"rows": [r.as_dict() for r in rows], "noise": noise.result,
               "args": vars(args)})
    return 0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- subprocess mode

def _stats_main(directory: str) -> int:
    from flud.cli.runner import run_reactor
    from flud.testnet.query import collect_stats
    nodes = launch.load(directory)["nodes"]
    rows = run_reactor(lambda reactor: collect_stats(reactor, directory, nodes))
    json.dump([s for _, s in rows], sys.stdout)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "stats":
        sys.exit(_stats_main(sys.argv[2]))
    print("usage: common.py stats TESTNET_DIR", file=sys.stderr)
    sys.exit(2)


def uss_pss(pids) -> tuple:
    """Median USS and PSS (bytes) of the live processes among pids, or (None, None)."""
    import psutil
    u, p = [], []
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
            u.append(info.uss)
            p.append(info.pss)
        except Exception:
            pass   # a process gone meanwhile
    if not u:
        return None, None
    return statistics.median(u), statistics.median(p)
