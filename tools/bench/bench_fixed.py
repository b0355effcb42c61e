"""A command's fixed cost (issue 27): the 51-file mix, `flud ls`, one file out
of a big snapshot, each as a whole command, and where the time goes.

    .venv/bin/python tools/bench/bench_fixed.py [--quick] [--repeat N] [--nodes N]
        [--ls-snapshots N] [--one-file-files N] [--compare SRC] [--no-phases]
    flock /work/bench.lock make bench BENCH_ARGS="--only fixed"

Figures (medians of --repeat, default 5 here; each against its target):
- the seed's 51-file mix (shared/tools/gen_mix.py) backed up from a fresh
  home, whole `flud backup` command: <= 0.4 s;
- `flud ls` (the snapshot list) of a home with --ls-snapshots (100) snapshots:
  <= 0.3 s;
- one file restored out of a snapshot of --one-file-files (50,000; 0: not
  measured) files, whole command: <= 1 s.
Beside each: the client's CPU (user + system, wait4).

Where the time goes (tools/bench/phase_trace.py, the same commands run under
timing wrappers, medians over --repeat runs): the phases of the whole
command one after the other (interpreter, cli = parsing, imports, home and
key, setup = job code, CPU pool, TLS contexts, bootstrap, root lookup, scan,
transfer, tree, map + head, finish, teardown, exit) and the network spans
that overlap them (lease renewal, DHT walks, head write). Then the imports of
a backup by package (`python -X importtime`, self time, one run).

--compare SRC: the same figures, interleaved run by run on the same testnet,
for the client code of another source tree (SRC holds a `flud` package, e.g.
`git archive main flud | tar -x -C /tmp/main`, with its built extensions
copied in): before and after in one sitting. Nodes always run this tree's.
Table: out/bench_fixed.txt (and .json).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row, Testnet, log  # noqa: E402

NAME = "bench_fixed"
TRACE = os.path.join(common.HERE, "phase_trace.py")
MIX_TARGET, LS_TARGET, ONE_FILE_TARGET = 0.4, 0.3, 1.0


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_fixed")
    g.add_argument("--ls-snapshots", type=int, default=None, metavar="N",
                   help="snapshots in the `flud ls` home (default 100; 10 quick)")
    g.add_argument("--one-file-files", type=int, default=None, metavar="N",
                   help="files in the snapshot one file is restored from (default 50000; "
                        "0 quick: not measured)")
    g.add_argument("--compare", default=None, metavar="SRC",
                   help="also measure the client code of this source tree, interleaved")
    g.add_argument("--no-phases", action="store_true", help="figures only, no breakdown")


class Client:
    """`flud` commands from this tree or another's (PYTHONPATH), from a
    directory outside both so the current one does not shadow it."""

    def __init__(self, label: str, src: str | None, slug: str):
        self.label = label
        self.slug = slug   # in file names
        self.env = None
        if src:
            self.env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}

    def run(self, *args, timeout=600):
        return common.run([common.PY, "-m", "flud", *map(str, args)], timeout=timeout,
                          env=self.env, cwd="/")

    def traced(self, out: str, *args, timeout=600):
        return common.run([common.PY, TRACE, out, "--", *map(str, args)], timeout=timeout,
                          env=self.env, cwd="/")


def _fresh_home(client, base, name, testnet) -> str:
    home = os.path.join(base, name)
    shutil.rmtree(home, ignore_errors=True)
    client.run("init", "--home", home, "--testnet", testnet).check("flud init")
    return home


def _phases(traces) -> tuple:
    """Medians of the traced runs' phases (ms) and of their spans' (start, length)."""
    phases, spans = {}, {}
    for t in traces:
        for name, seconds in t["phases"]:
            phases.setdefault(name, []).append(seconds * 1e3)
        for name, start, end in t.get("spans", []):
            spans.setdefault(name, []).append((start * 1e3, (end - start) * 1e3))
    order = []
    for t in traces:
        for name, _ in t["phases"]:
            if name not in order:
                order.append(name)
    return ([(n, common.median(phases[n])) for n in order],
            {n: (common.median([a for a, _ in v]), common.median([b for _, b in v]))
             for n, v in spans.items()})


def _breakdown_text(label, what, traces, walls) -> str:
    phases, spans = _phases(traces)
    lines = [f"{label}: {what}, medians of {len(traces)} traced runs (whole command "
             f"{common.fmt(common.median(walls) * 1e3)} ms untraced)"]
    at = 0.0
    for name, ms in phases:
        lines.append(f"  {name:<14} {ms:7.0f} ms   (ends at {at + ms:5.0f})")
        at += ms
    for name, (start, length) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        lines.append(f"  | {name:<48} {length:6.0f} ms from {start:5.0f}")
    return "\n".join(lines)


def _mix(args, clients, tn, base) -> tuple:
    mix = common.gen_mix(os.path.join(common.RUN_DIR, "data", "mix51"))
    walls = {c.label: [] for c in clients}
    cpus = {c.label: [] for c in clients}
    traces = {c.label: [] for c in clients}
    for i in range(args.fixed_repeat):
        for c in clients:
            log(f"{NAME}: 51-file mix, {c.label} ({i + 1}/{args.fixed_repeat})")
            home = _fresh_home(c, base, f"mix-{c.slug}-{i}", tn.dir)
            r = c.run("backup", mix, "--home", home).check("mix backup")
            walls[c.label].append(r.wall)
            cpus[c.label].append(r.cpu)
            shutil.rmtree(home, ignore_errors=True)
            if not args.no_phases:
                home = _fresh_home(c, base, f"mixt-{c.slug}-{i}", tn.dir)
                out = os.path.join(base, f"trace-mix-{c.slug}-{i}.json")
                c.traced(out, "backup", mix, "--home", home).check("traced mix backup")
                with open(out) as f:
                    traces[c.label].append(json.load(f))
                shutil.rmtree(home, ignore_errors=True)
    rows, texts = [], []
    for c in clients:
        rows.append(Row(f"51-file mix: backup, whole command ({c.label})", walls[c.label], "s",
                        MIX_TARGET, "<=", "issue 27: 0.63-0.70 s on main",
                        f"client CPU {common.fmt(common.median(cpus[c.label]))} s; a fresh "
                        f"home each time (start-up, walks, lease renewal, root lookup, head "
                        f"and map writes included)"))
        if traces[c.label]:
            texts.append(_breakdown_text(c.label, "51-file mix backup", traces[c.label],
                                         walls[c.label]))
    return rows, texts


def _ls(args, clients, tn, base) -> tuple:
    snapshots = args.ls_snapshots or (10 if args.quick else 100)
    home = _fresh_home(clients[0], base, "ls-home", tn.dir)
    small = os.path.join(base, "ls-src")
    os.makedirs(small, exist_ok=True)
    log(f"{NAME}: {snapshots} snapshots for `flud ls`")
    for i in range(snapshots):
        with open(os.path.join(small, "note.txt"), "w") as f:
            f.write(f"snapshot {i}\n")
        clients[0].run("backup", small, "--home", home).check("ls-home backup")
    rows, texts = [], []
    walls = {c.label: [] for c in clients}
    cpus = {c.label: [] for c in clients}
    traces = {c.label: [] for c in clients}
    for i in range(args.fixed_repeat):
        for c in clients:
            r = c.run("ls", "--home", home).check("flud ls")
            listed = len(re.findall(r"^snapshot ", r.stdout, re.M))
            if listed != snapshots:
                raise common.BenchError(f"flud ls listed {listed} of {snapshots} snapshots")
            walls[c.label].append(r.wall)
            cpus[c.label].append(r.cpu)
            if not args.no_phases:
                out = os.path.join(base, f"trace-ls-{c.slug}-{i}.json")
                c.traced(out, "ls", "--home", home).check("traced flud ls")
                with open(out) as f:
                    traces[c.label].append(json.load(f))
    for c in clients:
        rows.append(Row(f"`flud ls` of a home with {snapshots} snapshots ({c.label})",
                        walls[c.label], "s", LS_TARGET, "<=", "issue 27: 0.36 s on main",
                        f"client CPU {common.fmt(common.median(cpus[c.label]))} s; the "
                        f"snapshot list from the local index, whole command"))
        if traces[c.label]:
            texts.append(_breakdown_text(c.label, f"`flud ls` ({snapshots} snapshots)",
                                         traces[c.label], walls[c.label]))
    return rows, texts


def _one_file(args, clients, tn, base) -> list:
    files = args.one_file_files
    if files is None:
        files = 0 if args.quick else 50_000
    if not files:
        return ()
    from bench_tree import _tree
    tree, _ = _tree(files, None, 1)
    home = _fresh_home(clients[0], base, "one-home", tn.dir)
    log(f"{NAME}: backing up the {files}-file tree for the one-file restore")
    clients[0].run("backup", tree, "--home", home, timeout=3600).check("tree backup")
    one = None
    for dirpath, _, names in sorted(os.walk(tree)):
        if names and dirpath != tree:
            one = os.path.join(os.path.basename(tree), os.path.relpath(dirpath, tree),
                               sorted(names)[0])
            break
    walls = {c.label: [] for c in clients}
    cpus = {c.label: [] for c in clients}
    traces = {c.label: [] for c in clients}
    ok = True
    for i in range(args.fixed_repeat):
        for c in clients:
            dest = os.path.join(base, f"one-{c.slug}-{i}")
            shutil.rmtree(dest, ignore_errors=True)
            r = c.run("restore", "--home", home, "--to", dest, one).check("one-file restore")
            ok = ok and os.path.isfile(os.path.join(dest, one))
            walls[c.label].append(r.wall)
            cpus[c.label].append(r.cpu)
            shutil.rmtree(dest, ignore_errors=True)
            if not args.no_phases:
                out = os.path.join(base, f"trace-one-{c.slug}-{i}.json")
                c.traced(out, "restore", "--home", home, "--to", dest, one).check(
                    "traced one-file restore")
                shutil.rmtree(dest, ignore_errors=True)
                with open(out) as f:
                    traces[c.label].append(json.load(f))
    texts = [_breakdown_text(c.label, f"one file out of {files:,}", traces[c.label],
                             walls[c.label]) for c in clients if traces[c.label]]
    return texts, [Row(f"one file out of a {files:,}-file snapshot, whole command ({c.label})",
                walls[c.label], "s", ONE_FILE_TARGET, "<=", "issue 27: 0.97 s on main",
                f"client CPU {common.fmt(common.median(cpus[c.label]))} s; {one}; "
                f"{'restored' if ok else 'NOT RESTORED'}") for c in clients]


def _imports(clients, tn, base) -> list:
    """A backup's imports by top-level package: self time, one run each."""
    mix = common.gen_mix(os.path.join(common.RUN_DIR, "data", "mix51"))
    texts = []
    for c in clients:
        home = _fresh_home(c, base, f"imp-{c.slug}", tn.dir)
        r = common.run([common.PY, "-X", "importtime", "-m", "flud", "backup", mix, "--home",
                        home], env=c.env, cwd="/", timeout=600).check("importtime backup")
        by_package, modules = {}, 0
        for line in r.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+\d+ \| +(\S+)", line)
            if m:
                modules += 1
                top = m.group(2).split(".")[0]
                by_package[top] = by_package.get(top, 0) + int(m.group(1))
        total = sum(by_package.values())
        top = sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
        texts.append(f"{c.label}: a backup's imports, {modules} modules, "
                     f"{total / 1e3:.0f} ms (self times, one run): "
                     + ", ".join(f"{name} {us / 1e3:.0f}" for name, us in top))
        shutil.rmtree(home, ignore_errors=True)
    return texts


def run(args) -> list:
    # this part's figures are medians of 5 unless --repeat says otherwise
    args.fixed_repeat = 5 if "--repeat" not in sys.argv and not args.quick else args.repeat
    if not common.have_gen_mix():
        return [Row("51-file mix: backup, whole command", [], "s", MIX_TARGET, "<=",
                    note=f"skipped: {common.GEN_MIX} is missing")]
    # bytecode compiled ahead (as `make bench` does): where PYTHONDONTWRITEBYTECODE
    # is set, every command would compile its modules again
    common.run([common.PY, "-m", "compileall", "-q", "flud", "tools"])
    clients = [Client("this tree", None, "this")]
    if args.compare:
        common.run([common.PY, "-m", "compileall", "-q", args.compare])
        clients.append(Client(f"compare: {args.compare}", args.compare, "compare"))
    base = os.path.join(common.RUN_DIR, "fixed")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    rows, texts = [], []
    started = time.monotonic()
    try:
        tn.up()
        got, text = _mix(args, clients, tn, base)
        rows += got
        texts += text
        got, text = _ls(args, clients, tn, base)
        rows += got
        texts += text
        got = _one_file(args, clients, tn, base)
        if got:
            texts += got[0]
            rows += got[1]
        if not args.no_phases:
            texts += _imports(clients, tn, base)
    except common.BenchError as err:
        log(f"{NAME}: {err}")
        rows.append(Row(f"{NAME} failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    text = "\n\n".join(texts)
    if text:
        print(text)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=f"{NAME}: {args.nodes}-node testnet; medians of "
                                       f"{args.fixed_repeat}; {time.monotonic() - started:.0f} s; "
                                       f"load average {os.getloadavg()[0]:.1f} at the end",
                           out=f)
        f.write("\n" + text + "\n")
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
