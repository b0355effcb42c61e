"""A generated home tree against restic (issue 18's figures), on a 50-node testnet.

    .venv/bin/python tools/bench/bench_tree.py [--quick] [--repeat N] [--files N] [--bytes B]
                                               [--seed S] [--no-restic]

- The tree: gen_tree.py (default 50,000 files, 1 GB; 2,000 files with --quick), made once
  under run/bench/data and kept for later runs (a stamp beside it).
- flud, each repetition from a fresh client home (a new secret: convergent encryption
  would find the previous repetition's data already stored): backup (whole command),
  bytes stored on the nodes (sum of the STATS bytes_stored deltas), restore (whole
  command; the first one compared with the source by tools/treecmp.py), a no-change
  backup (whole command, and the bytes the new snapshot added on the nodes), peak RSS
  of backup and restore (wait4 ru_maxrss) against static + memory budget + 16 MB.
- restic on the same tree in the same run, interleaved with flud's repetitions (a fresh
  repository each time, in the run directory): backup, restore, no-change backup,
  repository size, peak RSS. Installed from Debian's package when missing and this runs
  as root; if it cannot be had, flud's figures are reported alone.
- Each flud figure is printed with issue 18's target and its ratio to restic's.
  Peak RSS: run it with --files 30000 and --files 300000 for the two figures the issue
  asks for (the row names the file count).
Table: out/bench_tree.txt (and out/bench_tree.json).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402
import restic as restic_tool  # noqa: E402
from gen_tree import VERSION as TREE_VERSION  # noqa: E402

NAME = "bench_tree"
GEN_TREE = os.path.join(common.HERE, "gen_tree.py")
BUDGET = 64 * MiB  # flud's default --memory-budget
RSS_SLACK = 16 * MB  # issue 18: peak RSS <= static + budget + 16 MB
NO_CHANGE_STORED = 64 * 1024  # issue 18: at most 64 KiB stored for a no-change snapshot
TIMEOUT = 6 * 3600


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_tree")
    g.add_argument("--files", dest="tree_gen_files", type=int, default=None, metavar="N",
                   help="files in the generated tree (default 50000; 2000 with --quick)")
    g.add_argument("--bytes", dest="tree_gen_bytes", default=None, metavar="B",
                   help="bytes in the generated tree, e.g. 1G (default 20 kB a file)")
    g.add_argument("--seed", dest="tree_gen_seed", type=int, default=1, metavar="S",
                   help="generator seed (default 1)")
    g.add_argument("--no-restic", action="store_true", help="flud's figures alone")


def run(args) -> list:
    files = args.tree_gen_files or (2000 if args.quick else 50_000)
    base = os.path.join(common.RUN_DIR, "tree")
    rows = []
    try:
        tree, summary = _tree(files, args.tree_gen_bytes, args.tree_gen_seed)
    except common.BenchError as err:
        log(f"bench_tree: {err}")
        return [Row("bench_tree: generating the tree failed", [], note=str(err)[:300])]
    binary, why = (None, "--no-restic") if args.no_restic else restic_tool.find_restic()
    if not binary:
        log(f"bench_tree: {why}; flud's figures alone")
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    flud_runs, restic_runs = [], []
    try:
        tn.up()
        for i in range(args.repeat):
            flud_runs.append(_flud_once(tn, base, tree, i, args.repeat))
            if binary:
                restic_runs.append(_restic_once(binary, base, tree, i, args.repeat))
        rows = _rows(summary, flud_runs, restic_runs, binary, why)
    except common.BenchError as err:
        log(f"bench_tree: {err}")
        rows.append(Row("bench_tree failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, f"{NAME}.txt"), "w") as f:
        common.print_table(rows, title=f"{NAME}: {summary['files']:,} files, "
                                       f"{summary['bytes'] / MB:,.0f} MB, seed {summary['seed']}; "
                                       f"{args.nodes}-node testnet; medians of {args.repeat}",
                           out=f)
    return rows


def _tree(files: int, nbytes, seed: int) -> tuple:
    """The generated tree, made once and kept (a stamp beside it holds its summary)."""
    label = f"tree{TREE_VERSION}-{files}-{nbytes or 'auto'}-{seed}"
    tree = os.path.join(common.RUN_DIR, "data", label)
    stamp = tree + ".json"
    if os.path.isdir(tree) and os.path.exists(stamp):
        with open(stamp) as f:
            return tree, json.load(f)
    shutil.rmtree(tree, ignore_errors=True)
    log(f"bench_tree: generating {files} files (seed {seed}) in {tree}")
    argv = [common.PY, GEN_TREE, tree, "--files", str(files), "--seed", str(seed),
            "--summary-json", stamp] + (["--bytes", str(nbytes)] if nbytes else [])
    r = common.run(argv, timeout=TIMEOUT).check("gen_tree")
    print(r.stdout, end="", file=sys.stderr)
    with open(stamp) as f:
        return tree, json.load(f)


def _flud_once(tn, base, tree, i, repeat) -> dict:
    home = common.new_home(os.path.join(base, f"cl{i}"), tn.dir)
    cfg = common.home_config(home)
    log(f"bench_tree: flud backup ({i + 1}/{repeat})")
    before = tn.bytes_stored()
    r = common.flud("backup", tree, "--home", home, "--json",
                    timeout=TIMEOUT).check("flud backup")
    stored = tn.bytes_stored() - before
    s = common.parse_backup(r.stdout)
    out = {"backup": r.wall, "stored": stored, "backup_rss": r.maxrss, "k": cfg["k"],
           "n": cfg["n"], "static": s.get("static_rss"), "backup_elapsed": s.get("elapsed"),
           "backup_sent": s.get("sent"), "stores": s.get("stores")}
    dest = os.path.join(base, f"rs{i}")
    shutil.rmtree(dest, ignore_errors=True)
    log(f"bench_tree: flud restore ({i + 1}/{repeat})")
    r = common.flud("restore", "--home", home, "--to", dest, "--json",
                    timeout=TIMEOUT).check("flud restore")
    rs = common.parse_restore(r.stdout)
    out.update(restore=r.wall, restore_rss=r.maxrss, retrieves=rs.get("retrieves"),
               restore_static=rs.get("static_rss"))
    if i == 0:
        from tools.treecmp import compare_trees
        out["problems"] = compare_trees(tree, os.path.join(dest, os.path.basename(tree)))
    shutil.rmtree(dest, ignore_errors=True)
    log(f"bench_tree: flud no-change backup ({i + 1}/{repeat})")
    before = tn.bytes_stored()
    r = common.flud("backup", tree, "--home", home, "--json", timeout=TIMEOUT)
    r.check("flud backup (no change)")
    s = common.parse_backup(r.stdout)
    out.update(nochange=r.wall, nochange_stored=tn.bytes_stored() - before,
               nochange_sent=s.get("sent"), nochange_rss=r.maxrss)
    shutil.rmtree(home, ignore_errors=True)
    return out


def _restic_once(binary, base, tree, i, repeat) -> dict:
    repo = restic_tool.Restic(binary, os.path.join(base, f"restic{i}"), timeout=TIMEOUT)
    repo.init()
    log(f"bench_tree: restic backup ({i + 1}/{repeat})")
    r = repo.backup(tree)
    out = {"backup": r.wall, "backup_rss": r.maxrss, "size": repo.size(),
           "added": restic_tool.parse_added(r.stdout)}
    dest = os.path.join(base, f"restic-rs{i}")
    shutil.rmtree(dest, ignore_errors=True)
    log(f"bench_tree: restic restore ({i + 1}/{repeat})")
    r = repo.restore(dest)
    out.update(restore=r.wall, restore_rss=r.maxrss)
    if i == 0:
        from tools.treecmp import compare_trees
        out["problems"] = compare_trees(tree, repo.restored_path(dest, tree))
    shutil.rmtree(dest, ignore_errors=True)
    log(f"bench_tree: restic no-change backup ({i + 1}/{repeat})")
    r = repo.backup(tree)
    out.update(nochange=r.wall, nochange_stored=repo.size() - out["size"],
               nochange_rss=r.maxrss)
    if i == 0:
        out["version"] = restic_tool.version(binary)
    repo.remove()
    return out


def _med(runs, key):
    return common.median([r.get(key) for r in runs])


def _ratio(flud_value, restic_value) -> str:
    if flud_value is None or not restic_value:
        return "restic: -"
    return f"{flud_value / restic_value:.2f}x restic's"


def _rows(summary, fl, rs, binary, why) -> list:
    files, nbytes = summary["files"], summary["bytes"]
    k, n = fl[0]["k"], fl[0]["n"]
    have = bool(rs)
    version = rs[0].get("version", "?") if have else None
    who = f"restic {version}" if have else f"no restic ({why})"
    static = _med(fl, "static") or 0
    rss_bound = (static + BUDGET + RSS_SLACK) / MB if static else None
    same = "restore identical to the source" if not fl[0].get("problems") else \
        f"{len(fl[0]['problems'])} DIFFERENCES, e.g. {fl[0]['problems'][:3]}"
    rsame = ("identical" if not rs[0].get("problems") else
             f"{len(rs[0]['problems'])} differences") if have else "-"

    def target(key, factor=1.0):
        return _med(rs, key) * factor if have else None

    def rss_row(job, key, target_text):
        return Row(f"peak RSS, {job} of {files:,} files", [r[key] / MB for r in fl], "MB",
                   rss_bound, "<=" if rss_bound else None,
                   f"{who}: {common.fmt(target(key) and target(key) / MB)} MB" if have else who,
                   f"{_ratio(_med(fl, key), target(key))}; wait4 ru_maxrss; target: {target_text}")

    rows = [
        Row(f"generated tree: {files:,} files, {nbytes / MB:,.0f} MB", [summary["elapsed_s"]], "s",
            None, None, "-",
            f"seed {summary['seed']}; {summary['dirs']:,} dirs, {summary['symlinks']} symlinks, "
            f"{summary['duplicates']} copies; ~{summary['ratio'] or 0:.2f}x with "
            f"{summary['compressor']} per file (sampled); generation time is the figure"),
        Row(f"tree backup, {files:,} files (whole command)", [r["backup"] for r in fl], "s",
            target("backup"), "<=" if have else None, who,
            f"{_ratio(_med(fl, 'backup'), target('backup'))}; flud's own clock "
            f"{common.fmt(_med(fl, 'backup_elapsed'))} s, {fl[0].get('stores')} STOREs; "
            f"target: <= restic's wall time"),
        Row("tree restore (whole command)", [r["restore"] for r in fl], "s", target("restore"),
            "<=" if have else None, who,
            f"{_ratio(_med(fl, 'restore'), target('restore'))}; {fl[0].get('retrieves')} "
            f"RETRIEVEs; {same}; target: <= restic's wall time"),
        Row("no-change backup (whole command)", [r["nochange"] for r in fl], "s",
            target("nochange", 0.5), "<=" if have else None, who,
            f"{_ratio(_med(fl, 'nochange'), target('nochange'))}; target: <= half of restic's"),
        Row("no-change backup: bytes the new snapshot stored on the nodes",
            [r["nochange_stored"] / 1024 for r in fl], "KiB", NO_CHANGE_STORED / 1024, "<=",
            f"{who}: {common.fmt((target('nochange_stored') or 0) / 1024)} KiB"
            if have else who,
            f"sum of the nodes' bytes_stored deltas (n/k = {n}/{k} included); flud sent "
            f"{common.fmt((_med(fl, 'nochange_sent') or 0) / MB)} MB"),
        Row("bytes stored on the nodes", [r["stored"] / MB for r in fl], "MB",
            target("size", n / k) / MB if have else None, "<=" if have else None,
            f"{who}: repository {common.fmt(target('size') / MB)} MB" if have else who,
            f"{_ratio(_med(fl, 'stored'), target('size'))} repository; stored / plaintext "
            f"{_med(fl, 'stored') / nbytes:.2f} (n/k = {n}/{k}); target: <= n/k x restic's "
            f"repository"),
        rss_row("backup", "backup_rss", f"static {common.fmt(static / MB)} MB + budget "
                f"{BUDGET // MiB} MiB + 16 MB"),
        rss_row("restore", "restore_rss", "same target"),
    ]
    if have:
        rows += [
            Row("restic backup (whole command)", [r["backup"] for r in rs], "s", None, None, who,
                f"local repository, {common.fmt(_med(rs, 'backup_rss') / MB)} MB peak RSS"),
            Row("restic restore (whole command)", [r["restore"] for r in rs], "s", None, None,
                who, f"restore {rsame} to the source; "
                     f"{common.fmt(_med(rs, 'restore_rss') / MB)} MB peak RSS"),
            Row("restic no-change backup (whole command)", [r["nochange"] for r in rs], "s",
                None, None, who,
                f"repository grew {common.fmt(_med(rs, 'nochange_stored') / 1024)} KiB"),
            Row("restic repository size", [r["size"] / MB for r in rs], "MB", None, None, who,
                f"plaintext / repository {nbytes / _med(rs, 'size'):.2f}x "
                f"(zstd 'auto' and chunk deduplication)"),
        ]
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
