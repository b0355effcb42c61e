"""flud against restic on two trees, one sitting (issue 27's closing figures).

    .venv/bin/python tools/bench/bench_vs_restic.py [--quick] [--repeat N] [--nodes N]
        [--vs-files N] [--real PATH[,PATH...]] [--no-real] [--no-fixed] [--snapshots N]
    make bench BENCH_ARGS="--only vs_restic"

- Trees: the generated one (gen_tree.py, 50,000 files by default; made once and
  kept, as bench_tree.py's) and a real one this machine holds that nobody here
  wrote (default /usr/share/doc, /usr/lib/python3.11 and /usr/include: Debian's
  documentation, the standard library, C headers).
- For each tree, repetitions interleaved (flud, restic, flud, restic, ...), each
  flud one from a fresh home on one testnet: backup and restore as whole
  commands, wall time and the client's CPU (wait4: user + system, the process
  and its children), the nodes' CPU over the same span (/proc of each node
  process), bytes stored on the nodes against n/k x restic's repository.
  restic (Debian's package, installed with apt-get when missing and allowed):
  a local repository, backup and restore, wall and CPU. Medians.
- Fixed cost (the home of the generated tree's last repetition): the seed's
  51-file mix backed up as a whole command (gen_mix.py; a fresh home each
  time, medians), `flud ls` (the snapshot list) of a home with N snapshots
  (default 100), `flud ls --dir /` of the newest (records from the home's
  record cache), and one file restored out of the generated snapshot.
- Where the client's CPU goes (stage_profile.py; --no-stages leaves it out): one
  more backup and restore of each tree, profiled, split by stage (walk, read, hash,
  chunk, compress, encrypt, code, tar, records, index, TLS, ...) and by thread,
  beside this machine's floor: the single-core cost of reading, hashing,
  compressing, encrypting and coding the tree's bytes, over the cores.
- The machine is shared: every figure is printed with how much CPU other
  people's processes took while this ran (run_all's noise column).
Table: out/bench_vs_restic.txt (and .json).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import restic as restic_tool  # noqa: E402
import stage_profile  # noqa: E402
from bench_tree import _tree  # noqa: E402
from common import MB, Row, Testnet, log  # noqa: E402

NAME = "bench_vs_restic"
REAL = ("/usr/share/doc", "/usr/lib/python3.11", "/usr/include")
TIMEOUT = 3600
_TICK = os.sysconf("SC_CLK_TCK")
STAGE_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stage_profile.py")


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_vs_restic")
    g.add_argument("--vs-files", type=int, default=None, metavar="N",
                   help="files in the generated tree (default 50000; 2000 quick)")
    g.add_argument("--real", default=None, metavar="PATHS",
                   help="comma list of the real tree's paths (default: " + ",".join(REAL) + ")")
    g.add_argument("--no-real", action="store_true", help="the generated tree only")
    g.add_argument("--no-fixed", action="store_true", help="no fixed-cost figures")
    g.add_argument("--no-stages", action="store_true",
                   help="no CPU split by stage (one more profiled backup and restore per tree)")
    g.add_argument("--snapshots", type=int, default=None, metavar="N",
                   help="snapshots for the `flud ls` figure (default 100; 10 quick)")


def _cpu(pids) -> float:
    """CPU seconds (user + system) the processes used so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / _TICK


def _timed(tn, fn):
    before = _cpu(tn.pids())
    result = fn()
    return result, _cpu(tn.pids()) - before


def _flud_once(tn, base, paths, i) -> dict:
    home = common.new_home(os.path.join(base, f"cl{i}"), tn.dir)
    cfg = common.home_config(home)
    stored0 = tn.bytes_stored()
    r, nodes = _timed(tn, lambda: common.flud("backup", *paths, "--home", home,
                                              timeout=TIMEOUT).check("flud backup"))
    out = {"backup": r.wall, "backup_cpu": r.cpu, "backup_nodes": nodes,
           "stored": tn.bytes_stored() - stored0, "k": cfg["k"], "n": cfg["n"],
           "backup_rss": r.maxrss, "home": home}
    dest = os.path.join(base, f"rs{i}")
    shutil.rmtree(dest, ignore_errors=True)
    r, nodes = _timed(tn, lambda: common.flud("restore", "--home", home, "--to", dest,
                                              "--json", timeout=TIMEOUT).check("flud restore"))
    rs = common.parse_restore(r.stdout)
    out.update(restore=r.wall, restore_cpu=r.cpu, restore_nodes=nodes,
               restore_rss=r.maxrss, retrieves=rs.get("retrieves"))
    if i == 0:
        from tools.treecmp import compare_trees
        out["problems"] = sum(len(compare_trees(p, os.path.join(dest, os.path.basename(p))))
                              for p in paths)
    shutil.rmtree(dest, ignore_errors=True)
    return out


def _restic_once(binary, base, paths, i) -> dict:
    repo = restic_tool.Restic(binary, os.path.join(base, f"restic{i}"), timeout=TIMEOUT)
    repo.init()
    r = repo.backup(*paths)
    out = {"backup": r.wall, "backup_cpu": r.cpu, "size": repo.size()}
    dest = os.path.join(base, f"restic-rs{i}")
    shutil.rmtree(dest, ignore_errors=True)
    r = repo.restore(dest)
    out.update(restore=r.wall, restore_cpu=r.cpu)
    shutil.rmtree(dest, ignore_errors=True)
    repo.remove()
    return out


def _staged(tn, base, paths) -> dict:
    """One more backup and restore (a fresh home), each run under
    stage_profile.py: the client's CPU by stage, beside the timed runs."""
    home = common.new_home(os.path.join(base, "staged"), tn.dir)
    out = {}
    for job, argv in (("backup", ["backup", *paths, "--home", home]),
                      ("restore", ["restore", "--home", home, "--to",
                                   os.path.join(base, "staged-rs")])):
        path = os.path.join(base, f"stages-{job}.json")
        common.run([common.PY, STAGE_PROFILE, path, "--", *argv],
                   timeout=TIMEOUT).check(f"staged {job}")
        with open(path) as f:
            out[job] = json.load(f)
    shutil.rmtree(os.path.join(base, "staged-rs"), ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    return out


def _stage_rows(label, staged, limit) -> list:
    rows = []
    for job in ("backup", "restore"):
        got = staged[job]
        threads = "; ".join(f"{name} {sum(v.values()):.1f} s" for name, v in got["threads"].items()
                            if name != "stage-sampler")
        rows.append(Row(f"{label}: {job}, client CPU by stage (one more run)",
                        [sum(v for k, v in got["stages"].items() if k != "profiler")], "s",
                        None, None, "-",
                        f"{stage_profile.split_text(got['stages'])}; by thread: {threads}; "
                        f"profiler {got['stages'].get('profiler', 0):.2f} s left out"))
    rows.append(Row(f"{label}: this machine's floor (bytes to read, hash, compress, encrypt, "
                    "code)", [limit["floor_s"]], "s", None, None, "-",
                    stage_profile.floor_text(limit) + "; no backup of these bytes here "
                    "takes less wall time"))
    return rows


def _med(runs, key):
    return common.median([r[key] for r in runs if r.get(key) is not None])


def _tree_rows(label, paths, nbytes, nfiles, fl, rs, who) -> list:
    k, n = fl[0]["k"], fl[0]["n"]

    def vs(key, unit="s"):
        if not rs:
            return who, None
        theirs = _med(rs, key)
        return f"{who}: {common.fmt(theirs)} {unit}", theirs

    rows = []
    for job in ("backup", "restore"):
        anchor, theirs = vs(job)
        ratio = f"{_med(fl, job) / theirs:.2f}x restic's" if theirs else "-"
        rows.append(Row(f"{label}: {job}, whole command", [r[job] for r in fl], "s", theirs,
                        "<=" if theirs else None, anchor,
                        f"{ratio}; {nfiles:,} files, {nbytes / MB:,.0f} MB"
                        + (f"; {fl[0].get('problems')} differences from the source"
                           if job == "restore" else "")))
        anchor, theirs = vs(f"{job}_cpu")
        ratio = f"{_med(fl, f'{job}_cpu') / theirs:.2f}x restic's" if theirs else "-"
        rows.append(Row(f"{label}: {job}, client CPU", [r[f"{job}_cpu"] for r in fl], "s",
                        theirs, "<=" if theirs else None, anchor,
                        f"{ratio}; nodes {common.fmt(_med(fl, f'{job}_nodes'))} s CPU beside; "
                        f"peak RSS {common.fmt(_med(fl, f'{job}_rss') / MB)} MB"))
    theirs = _med(rs, "size") if rs else None
    rows.append(Row(f"{label}: bytes on the nodes", [r["stored"] / MB for r in fl], "MB",
                    theirs and theirs * n / k / MB, "<=" if theirs else None,
                    f"{who}: repository {common.fmt(theirs and theirs / MB)} MB" if rs else who,
                    f"n/k = {n}/{k}; stored / (n/k x restic's) "
                    f"{_med(fl, 'stored') / (theirs * n / k):.2f}" if theirs else f"n/k={n}/{k}"))
    return rows


def _one_tree(args, tn, base, label, paths, binary, who) -> list:
    nbytes = sum(restic_tool.tree_bytes(p) for p in paths)
    nfiles = sum(len(names) for p in paths for _, _, names in os.walk(p))
    fl, rs = [], []
    for i in range(args.repeat):
        log(f"{NAME}: {label}: flud ({i + 1}/{args.repeat})")
        fl.append(_flud_once(tn, os.path.join(base, label), paths, i))
        if binary:
            log(f"{NAME}: {label}: restic ({i + 1}/{args.repeat})")
            rs.append(_restic_once(binary, os.path.join(base, label), paths, i))
    rows = _tree_rows(label, paths, nbytes, nfiles, fl, rs, who)
    if not args.no_stages:
        log(f"{NAME}: {label}: where the client's CPU goes (one more run, profiled)")
        staged = _staged(tn, os.path.join(base, label), paths)
        rows += _stage_rows(label, staged, stage_profile.floor(paths))
    return rows, fl


def _cpu_of(runs) -> str:
    return f"{common.median([r.cpu for r in runs]):.2f} s"


def _fixed(args, tn, base, tree, home) -> list:
    rows = []
    mix = common.gen_mix(os.path.join(base, "mix"))
    runs = []
    for i in range(args.repeat):
        h = common.new_home(os.path.join(base, f"mix-home{i}"), tn.dir)
        runs.append(common.flud("backup", mix, "--home", h).check("mix backup"))
        shutil.rmtree(h, ignore_errors=True)
    rows.append(Row("51-file mix: backup, whole command", [r.wall for r in runs], "s", 0.4,
                    "<=", "-", f"client CPU {_cpu_of(runs)}; a fresh home each time (start-up, "
                    "root lookup, lease renewal, head and map writes included)"))
    snapshots = args.snapshots or (10 if args.quick else 100)
    h = common.new_home(os.path.join(base, "ls-home"), tn.dir)
    small = os.path.join(base, "ls-src")
    os.makedirs(small, exist_ok=True)
    log(f"{NAME}: {snapshots} snapshots for `flud ls`")
    for i in range(snapshots):
        with open(os.path.join(small, "note.txt"), "w") as f:
            f.write(f"snapshot {i}\n")
        common.flud("backup", small, "--home", h).check("ls-home backup")
    runs = [common.flud("ls", "--home", h).check("flud ls") for _ in range(3)]
    rows.append(Row(f"`flud ls` of a home with {snapshots} snapshots", [r.wall for r in runs],
                    "s", 0.3, "<=", "-", f"client CPU {_cpu_of(runs)}; the snapshot list, "
                    "whole command"))
    runs = [common.flud("ls", "--home", home, "--dir", "/").check("flud ls --dir")
            for _ in range(3)]
    rows.append(Row("`flud ls --dir /` of the generated snapshot", [r.wall for r in runs], "s",
                    None, None, "-", f"client CPU {_cpu_of(runs)}; root, map, and the top "
                    "directory's record (record cache)"))
    one = None
    for dirpath, _, names in os.walk(tree):
        if names and dirpath != tree:
            one = os.path.join(os.path.basename(tree), os.path.relpath(dirpath, tree), names[0])
            break
    runs = []
    for i in range(3):
        dest = os.path.join(base, f"one{i}")
        shutil.rmtree(dest, ignore_errors=True)
        runs.append(common.flud("restore", "--home", home, "--to", dest, one)
                    .check("one-file restore"))
        ok = os.path.isfile(os.path.join(dest, one))
        shutil.rmtree(dest, ignore_errors=True)
    rows.append(Row("one file out of the generated snapshot, whole command",
                    [r.wall for r in runs], "s", 1.0, "<=", "-",
                    f"client CPU {_cpu_of(runs)}; {one}; "
                    f"{'restored' if ok else 'NOT RESTORED'}"))
    return rows


def run(args) -> list:
    # bytecode compiled ahead (as `make bench` does): where PYTHONDONTWRITEBYTECODE
    # is set, every command would compile its modules again
    common.run([common.PY, "-m", "compileall", "-q", "-o", "0", "-o", "2", "flud", "tools"])
    files = args.vs_files or (2000 if args.quick else 50_000)
    base = os.path.join(common.RUN_DIR, "vs_restic")
    shutil.rmtree(base, ignore_errors=True)
    rows = []
    tree, _ = _tree(files, None, 1)
    binary, why = restic_tool.find_restic()
    who = f"restic {restic_tool.version(binary)}" if binary else f"no restic ({why})"
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    started = time.monotonic()
    try:
        tn.up()
        got, fl = _one_tree(args, tn, base, "generated", [tree], binary, who)
        rows += got
        if not args.no_real:
            real = [p for p in (args.real.split(",") if args.real else REAL) if os.path.isdir(p)]
            got, _ = _one_tree(args, tn, base, "real (" + " ".join(real) + ")", real, binary,
                               who)
            rows += got
        if not args.no_fixed:
            rows += _fixed(args, tn, base, tree, fl[-1]["home"])
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows.append(Row(f"{NAME} failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=f"{NAME}: {args.nodes}-node testnet; medians of "
                                       f"{args.repeat}; {time.monotonic() - started:.0f} s; "
                                       f"load average {os.getloadavg()[0]:.1f} at the end",
                           out=f)
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
