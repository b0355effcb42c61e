"""Memory figures (issue 5): static footprints, import costs, concurrent uploads.

    .venv/bin/python tools/bench/bench_memory.py [--quick] [--repeat N]

- Static footprint of an idle node: a small testnet started with
  `--spawn exec` (each node its own fresh interpreter, so its RSS is its own:
  bench_node reports the forked 50-node testnet), STATS memory.rss after it
  settles; static_rss, USS in notes.
- Static footprint of the client: a fresh interpreter that imports what
  `flud backup` imports (RSS after gc and malloc_trim), and the static figure
  flud's own backup summary prints.
- What each import adds to a node: one fresh interpreter per cumulative step
  (twisted reactor, sqlite3, ctypes, blake3, zfec, psutil, ssl, storage,
  flud protocol, the node service), median of --repeat; out/imports.txt.
- Concurrent uploads of 1 GiB files (1, 4 and 16 at once) in ONE client
  process: `flud backup --parallel-files c` of a directory holding c distinct
  random files (made once, os.urandom in 64 MiB pieces; the directory for c
  hard-links the first c), on a fresh 50-node testnet whose nodes log memory.
  The client writes --memory-log (RSS, buffered bytes and the largest
  transfer, 4 times a second; its first row is the static footprint, taken
  before any transfer) and its peak RSS comes from the kernel (wait4). An
  upload still running after --mem-seconds is stopped (SIGTERM) and the share
  of bytes read is noted: memory must not grow with the file, so the steady
  state is what counts. Targets: <= 4 MiB per transfer; with 16 uploads,
  that process's peak RSS <= static + 16 x 4 MiB + 10% (the issue's floor;
  1 and 4 uploads are compared with the same rule: one process pays its
  static footprint and its connections once, as a real client does); the
  busiest node is held to the rule with its own largest number of
  concurrent transfers.
- out/memory.png: tools/plot_memory.py on the single upload's CSV.
"""
from __future__ import annotations

import csv
import os
import shutil
import signal
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, GiB, Row, Testnet, log  # noqa: E402

from flud import procfs  # noqa: E402

NAME = "bench_memory"
PER_TRANSFER = 4 * MiB
FLOOR_UPLOADS = 16  # issue 5: RSS with 16 concurrent transfers <= static + 16 x 4 MiB + 10%
TAHOE = "Tahoe rule N/K x segment: 2 MiB at 4-of-8, 4.3 MiB at 3-of-10"

RSS_SNIPPET = """
import gc, ctypes, json, os
gc.collect()
try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
except OSError:
    pass
with open("/proc/self/statm") as f:
    rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import sys
print(json.dumps({"rss": rss, "psutil": "psutil" in sys.modules, "zfec": "zfec" in sys.modules,
                  "sqlite3": "sqlite3" in sys.modules}))
"""

IMPORT_STEPS = [
    ("python 3.11 (bare interpreter)", ""),
    ("+ flud.lean (http.cookiejar made lazy)",
     "from flud.lean import defer_unused_imports; defer_unused_imports()"),
    ("+ twisted: zope.interface", "import zope.interface"),
    ("+ twisted: attrs, incremental", "import attr, incremental"),
    ("+ twisted: twisted.python.failure, logger", "import twisted.python.failure, twisted.logger"),
    ("+ twisted: twisted.internet.defer (asyncio)", "import twisted.internet.defer"),
    ("+ twisted: reactor (epoll, tcp, protocol)",
     "from twisted.internet import epollreactor; epollreactor.install(); "
     "from twisted.internet import reactor, defer, protocol"),
    ("+ sqlite3", "import sqlite3"),
    ("+ ctypes (flud.libcrypto: keys on OpenSSL)", "import ctypes"),
    ("+ blake3", "import blake3"),
    ("+ zfec", "import zfec"),
    ("+ psutil", "import psutil"),
    ("+ ssl", "import ssl"),
    ("+ storage (share store, archives, index)", "import storage.disk"),
    ("+ flud protocol",
     "import flud.protocol.connection, flud.protocol.client, flud.protocol.codec, "
     "flud.protocol.session, flud.protocol.messages"),
    ("+ flud node service (memory, workers, peers)",
     "import flud.node.service, flud.memory, flud.workers, flud.node.process, flud.node.config"),
]
NODE_ONLY = ("from flud.node.process import preload; preload(); "
             "from twisted.internet import epollreactor; epollreactor.install()")
CLIENT_IMPORTS = ("from flud.lean import defer_unused_imports, tune_malloc; "
                  "defer_unused_imports(); tune_malloc(); "
                  "from twisted.internet import reactor; "
                  "import flud.cli.main, flud.cli.client, flud.cli.jobs, "
                  "flud.client.backup.backup_job, flud.client.restore.restore_job, flud.client.network, "
                  "flud.client.home, flud.memory, flud.workers, flud.testnet.query")


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_memory")
    g.add_argument("--mem-size", default=None, help="upload file size (default 1GiB)")
    g.add_argument("--mem-concurrency", default=None, help="comma list (default 1,4,16)")
    g.add_argument("--mem-seconds", type=float, default=None,
                   help="stop uploads still running after this (default 60; 20 quick)")


def run(args) -> list:
    from bench_backup import parse_size
    rows = []
    rows += _idle_node(args)
    rows += _client_static(args)
    rows += _imports(args)
    size = parse_size(args.mem_size) if args.mem_size else (64 * MiB if args.quick else GiB)
    conc = [int(c) for c in (args.mem_concurrency or ("1,4" if args.quick else "1,4,16"))
            .split(",")]
    cap = args.mem_seconds or (20.0 if args.quick else 60.0)
    rows += _concurrent(args, size, conc, cap)
    return rows


# ----------------------------------------------------------------- static parts

# a node runs with -OO (flud.lean.node_interpreter_argv), so its imports are measured so
NODE_FLAGS = ("-OO",)


def _rss_of(code: str, flags: tuple = ()) -> dict:
    r = common.run([common.PY, *flags, "-c", code + "\n" + RSS_SNIPPET], timeout=120)
    if r.rc != 0:
        raise common.BenchError(f"import step failed: {r.stderr[-600:]}")
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def _idle_node(args) -> list:
    count = 4
    tn = Testnet(os.path.join(common.RUN_DIR, "memory", "idle"), count, spawn="exec",
                 noise=getattr(args, "noise", None))
    rss, static, uss = [], [], []
    try:
        log(f"bench_memory: idle nodes ({count}, --spawn exec)")
        tn.up()
        time.sleep(2.0 if args.quick else 5.0)
        for _ in range(args.repeat):
            stats = [s for s in tn.stats() if s]
            rss.append(statistics.median(s["memory"]["rss"] for s in stats) / MB)
            static.append(statistics.median(s["memory"]["static_rss"] for s in stats) / MB)
            time.sleep(1.0)
        import psutil
        for pid in tn.pids():
            try:
                uss.append(psutil.Process(pid).memory_full_info().uss / MB)
            except Exception:
                pass
    finally:
        tn.down()
        tn.remove()
    node_imports = _rss_of(NODE_ONLY, flags=NODE_FLAGS)
    return [Row("static footprint, idle node (own interpreter)", rss, "MB", 32, "<=",
                "Tahoe-LAFS: 96 MB per node",
                f"STATS memory.rss of {count} exec-spawned nodes; static_rss "
                f"{common.fmt(common.median(static))} MB, USS "
                f"{common.fmt(common.median(uss))} MB; the node's imports alone (preload) "
                f"{node_imports['rss'] / MB:.1f} MB (psutil imported: "
                f"{node_imports['psutil']})")]


def _client_static(args) -> list:
    vals = [_rss_of(CLIENT_IMPORTS)["rss"] / MB for _ in range(args.repeat)]
    return [Row("static footprint, client (imports of `flud backup`)", vals, "MB", None, None,
                "Tahoe client: 115 MB peak for 100 MiB",
                "fresh interpreter, RSS after gc + malloc_trim; the backup summary's static "
                "figure is in the concurrent-upload rows")]


def _imports(args) -> list:
    log("bench_memory: import costs")
    code, table = [], []
    prev = None
    for label, stmt in IMPORT_STEPS:
        if stmt:
            code.append(stmt)
        vals = [_rss_of("\n".join(code), flags=NODE_FLAGS)["rss"] for _ in range(args.repeat)]
        rss = statistics.median(vals)
        table.append((label, rss, None if prev is None else rss - prev))
        prev = rss
    node = statistics.median(_rss_of(NODE_ONLY, flags=NODE_FLAGS)["rss"]
                             for _ in range(args.repeat))
    lines = ["what each import adds (cumulative, fresh -OO interpreter per step, RSS after gc + "
             "malloc_trim, median)",
             f"{'step':48} {'RSS MB':>8} {'adds MB':>8}"]
    for label, rss, delta in table:
        lines.append(f"{label:48} {rss / MB:8.1f} {'' if delta is None else f'{delta / MB:+8.1f}'}")
    lines.append(f"{'a node process imports (flud.node.process.preload)':48} {node / MB:8.1f}")
    text = "\n".join(lines)
    print(text)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, "imports.txt"), "w") as f:
        f.write(text + "\n")
    biggest = sorted(table[1:], key=lambda t: -(t[2] or 0))[:3]
    return [Row("node imports, all steps (table: out/imports.txt)", [table[-1][1] / MB], "MB",
                None, None, "seed: sqlite +6 MB, twisted.web +3 MB, pycryptopp +6 MB",
                "largest: " + ", ".join(f"{l.lstrip('+ ')} {d / MB:+.1f} MB"
                                        for l, _, d in biggest))]


# ------------------------------------------------------------ concurrent uploads

def _read_csv(path: str) -> list:
    try:
        with open(path, newline="") as f:
            return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)
                    if row.get("rss")]
    except (OSError, ValueError):
        return []


def _progress(stdout: str, size: int) -> float:
    """The part of `size` a backup read: 1 when it ended with its summary,
    else its last --json status line's bytes_done (a backup stopped at the cap)."""
    if common.parse_backup(stdout).get("elapsed") is not None:
        return 1.0
    status = common.json_lines(stdout, "status")
    if not status:
        return 0.0
    return min(1.0, (status[-1].get("bytes_done") or 0) / size)


# The kernel's peak RSS of a process counts what it inherited: a process
# started with vfork (Python's subprocess does) begins with its parent's
# *peak*, and a forked one with its parent's current RSS. So the client is
# started by this small wrapper (a fresh interpreter, ~10 MB): it forks and
# execs the client, waits for it and reports its rusage, and passes SIGTERM on.
MEASURED = "MEASURED-RUSAGE "
WRAPPER = f"""
import json, os, signal, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
signal.signal(signal.SIGTERM, lambda sig, frame: os.kill(pid, sig))
while True:
    try:
        _, status, usage = os.wait4(pid, 0)
        break
    except InterruptedError:
        continue
sys.stderr.write("\\n{MEASURED}" + json.dumps({{"maxrss": usage.ru_maxrss * 1024,
    "cpu": usage.ru_utime + usage.ru_stime}}) + "\\n")
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def _measured(r) -> dict:
    """The client's own rusage, as the wrapper reported it."""
    for line in reversed((r.stderr if r else "").splitlines()):
        if line.startswith(MEASURED):
            import json
            return json.loads(line[len(MEASURED):])
    return {}


def _own_peak_rss() -> int:
    """This process's peak RSS (VmHWM): a child starts from it."""
    try:
        return procfs.status_bytes("self", "VmHWM") or 0
    except OSError:
        return 0


def _run_capped(argv, cap: float, results: list, index: int) -> None:
    """common.run with SIGTERM at the cap (then SIGKILL): the rusage stays valid."""
    holder = {}

    def started(proc):
        holder["proc"] = proc

        def stop():
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    return
                time.sleep(5)
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
        t = threading.Timer(cap, stop)
        t.daemon = True
        t.start()
        holder["timer"] = t

    try:
        results[index] = common.run(argv, timeout=cap + 60, on_start=started)
    finally:
        if "timer" in holder:
            holder["timer"].cancel()


RANDOM_FILES = """
import sys
sys.path.insert(0, {here!r})
import common
for path in sys.argv[2:]:
    common.random_file(path, int(sys.argv[1]), chunk=64 * common.MiB)
"""


def _random_files(size: int, count: int) -> list:
    """count distinct random files of `size` bytes, made once and kept. Made in
    a child process: the kernel's peak RSS of a process we start counts the
    peak of the process that started it, which must stay small."""
    # Not big-SIZE: bench_backup backs up that whole directory.
    data = os.path.join(common.RUN_DIR, "data", f"conc-files-{size}")
    paths = [os.path.join(data, f"file-{j:02d}.bin") for j in range(count)]
    code = RANDOM_FILES.format(here=os.path.dirname(os.path.abspath(__file__)))
    common.run([common.PY, "-c", code, str(size), *paths], timeout=3600).check("random files")
    return paths


def _upload_dir(size: int, c: int) -> str:
    """A directory of c distinct random files (hard links to the kept ones)."""
    files = _random_files(size, c)
    conc_dir = os.path.join(common.RUN_DIR, "data", f"conc-{size}-c{c}")
    shutil.rmtree(conc_dir, ignore_errors=True)
    os.makedirs(conc_dir)
    for path in files:
        os.link(path, os.path.join(conc_dir, os.path.basename(path)))
    return conc_dir


def _concurrent(args, size: int, conc: list, cap: float) -> list:
    base = os.path.join(common.RUN_DIR, "memory")
    size_txt = f"{size / GiB:g} GiB" if size >= GiB else f"{size / MiB:g} MiB"
    log(f"bench_memory: {max(conc)} random file(s) of {size_txt} (made once)")
    dirs = {c: _upload_dir(size, c) for c in conc}
    rows = []
    for c in conc:
        tn = Testnet(os.path.join(base, f"tn-c{c}"), args.nodes, memory_log=True,
                     noise=getattr(args, "noise", None))
        home = os.path.join(base, f"cl-c{c}")
        try:
            tn.up()
            before = tn.stats()
            common.new_home(home, tn.dir)
            csv_path = os.path.join(base, f"client-c{c}.csv")
            results = [None]
            log(f"bench_memory: {c} concurrent upload(s) of {size_txt} in one client, "
                f"cap {cap:.0f} s")
            argv = [common.PY, "-c", WRAPPER, common.PY, "-m", "flud", "backup", dirs[c],
                    "--home", home, "--parallel-files", str(c), "--memory-log", csv_path,
                    "--json"]
            _run_capped(argv, cap, results, 0)
            node_stats = tn.stats()
            rows += _concurrent_rows(c, size_txt, size, results[0], csv_path, tn, before,
                                     node_stats, cap)
            if c == 1:
                _plot(csv_path, results[0], size_txt)
            if c == max(conc):
                _plot_node(tn, node_stats, c, size_txt)
        finally:
            tn.down()
            tn.remove()
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(dirs[c], ignore_errors=True)  # the links; the files stay
    return rows


def _concurrent_rows(c, size_txt, size, r, csv_path, tn, before, node_stats, cap) -> list:
    samples = _read_csv(csv_path)
    s = common.parse_backup(r.stdout) if r else {}
    # The log's first row is the static footprint (sampled before any transfer).
    static = s.get("static_rss") or (samples[0]["rss"] if samples else 0)
    csv_peak = max((x["rss"] for x in samples), default=0)
    kernel = _measured(r).get("maxrss", 0)
    peak = max(kernel, csv_peak)
    own = _own_peak_rss()
    # the log's exact figure; the summary's (printed to 2 digits) if none
    per_transfer = max((x.get("peak_transfer", 0) for x in samples), default=0) \
        or s.get("peak_transfer", 0)
    buffered = max((x["peak_buffered"] for x in samples), default=0)
    active = max((x["active_transfers"] for x in samples), default=0)
    done = _progress(r.stdout, size * c) if r else 0.0
    status = (f"finished in {r.wall:.0f} s" if done >= 1.0 else
              f"stopped at {cap:.0f} s, {100 * done:.0f}% of the bytes read")
    bound = 1.1 * (static + c * PER_TRANSFER)
    rows = [
        Row(f"{c} concurrent {size_txt} upload(s): per-transfer peak (client)",
            [per_transfer / MiB], "MiB", PER_TRANSFER / MiB, "<=", TAHOE,
            f"largest transfer in the --memory-log (peak_transfer column); all buffers "
            f"{buffered / MiB:.1f} MiB at most, up to {active:.0f} transfers at once (uploads "
            f"and the TLS send queue); {status}"),
        # The floor is for 16 transfers; with fewer, the rule is a
        # comparison (the connections to every node are a fixed cost it
        # leaves out, a larger share of a smaller bound).
        Row(f"{c} concurrent {size_txt} upload(s): client RSS (one process)", [peak / MB],
            "MB", bound / MB if c >= FLOOR_UPLOADS else None,
            "<=" if c >= FLOOR_UPLOADS else None, "static + c x 4 MiB + 10%",
            ("" if c >= FLOOR_UPLOADS else
             f"compared with the rule, {bound / MB:.1f} MB (the floor is for "
             f"{FLOOR_UPLOADS} uploads); ") +
            f"peak RSS of the one `flud backup --parallel-files {c}`: kernel (wait4) "
            f"{kernel / MB:.1f} MB, --memory-log {csv_peak / MB:.1f} MB; static "
            f"{static / MB:.1f} MB; growth above static {(peak - static) / MiB:.1f} MiB "
            f"(the default budget, 64 MiB, bounds the buffers); started through a small "
            f"wrapper, so not counting this bench's own peak ({own / MB:.1f} MB)"),
    ]
    # nodes: each against its idle RSS just before the uploads (connected to
    # every peer; STATS static_rss is taken before the node joins) plus its
    # busiest moment's transfers
    worst = None
    for node, st, idle in zip(tn.nodes, node_stats, before or []):
        if not st or not idle:
            continue
        samples = _read_csv(os.path.join(node["home"], "memory.csv"))
        active = max((x["active_transfers"] for x in samples), default=0)
        npeak = max([x["rss"] for x in samples] + [st["memory"]["peak_rss"]])
        nstatic = idle["memory"]["rss"]
        nbound = 1.1 * (nstatic + active * PER_TRANSFER)
        ratio = npeak / nbound if nbound else 0
        if worst is None or ratio > worst[0]:
            worst = (ratio, npeak, nbound, active, nstatic)
    if worst:
        peaks = [max(s["memory"]["peak_rss"], 0) for s in node_stats if s]
        rows.append(Row(f"{c} concurrent upload(s): busiest node's RSS",
                        [worst[1] / MB], "MB", worst[2] / MB, "<=", "static + c x 4 MiB + 10%",
                        f"the node nearest its bound: idle RSS before the uploads "
                        f"{worst[4] / MB:.1f} MB, up to {worst[3]:.0f} concurrent transfers "
                        f"(memory.csv, sampled every 0.25 s); node peak RSS median "
                        f"{statistics.median(peaks) / MB:.1f} MB, max {max(peaks) / MB:.1f} MB"))
    return rows


def _plot(csv_path, result, size_txt) -> None:
    s = common.parse_backup(result.stdout) if result else {}
    static = int(s["static_rss"]) if s.get("static_rss") else None
    out = os.path.join(common.OUT_DIR, "memory.png")
    os.makedirs(common.OUT_DIR, exist_ok=True)
    shutil.copy(csv_path, os.path.join(common.OUT_DIR, "memory.csv"))
    argv = [common.PY, os.path.join(common.ROOT, "tools", "plot_memory.py"), csv_path, out,
            f"flud backup of one {size_txt} file (client)"] + ([str(static)] if static else [])
    r = common.run(argv, timeout=120)
    if r.rc != 0:
        log(f"bench_memory: plot failed: {r.stderr[-400:]}")
    else:
        log(f"bench_memory: {out}")


def _plot_node(tn, node_stats, c, size_txt) -> None:
    best = None
    for node, st in zip(tn.nodes, node_stats):
        samples = _read_csv(os.path.join(node["home"], "memory.csv"))
        active = max((x["active_transfers"] for x in samples), default=0)
        if st and (best is None or active > best[0]):
            best = (active, node, st)
    if not best:
        return
    path = os.path.join(best[1]["home"], "memory.csv")
    out = os.path.join(common.OUT_DIR, "memory_node.png")
    shutil.copy(path, os.path.join(common.OUT_DIR, "memory_node.csv"))
    argv = [common.PY, os.path.join(common.ROOT, "tools", "plot_memory.py"), path, out,
            f"busiest node during {c} concurrent {size_txt} uploads",
            str(best[2]["memory"]["static_rss"])]
    common.run(argv, timeout=120)


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
