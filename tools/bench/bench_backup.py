"""Backup and restore figures (issue 3), on a 50-node testnet.

    .venv/bin/python tools/bench/bench_backup.py [--quick] [--repeat N] [--size 1GiB]

- Large-file backup and restore throughput in plaintext MB/s: one file of
  random bytes (1 GiB by default), a fresh client home for every repetition
  (a new secret: convergent encryption would otherwise find everything already
  stored). MB/s = file size / the time flud reports (its own clock, from the
  start of the job to its end; process start-up is in the wall-time note).
  The first restore is compared byte for byte with the source.
- Client peak RSS during the large backup: the kernel's high-water mark of the
  `flud backup` process (wait4 ru_maxrss); flud's own summary figure in notes.
- No-change backup of a >=4000-file tree in the seed's home mix: back it up
  once, then time the whole `flud backup` command again (median of --repeat).
"""
from __future__ import annotations

import filecmp
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, GiB, Row, Testnet, log  # noqa: E402

NAME = "bench_backup"


def parse_size(text: str) -> int:
    t = text.strip().upper().replace("IB", "I")
    mult = {"K": 1e3, "M": 1e6, "G": 1e9, "KI": 1 << 10, "MI": MiB, "GI": GiB}
    for suffix in sorted(mult, key=len, reverse=True):
        if t.endswith(suffix):
            return int(float(t[:-len(suffix)]) * mult[suffix])
    return int(float(t.rstrip("B")))


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_backup")
    g.add_argument("--size", "--big-size", dest="big_size", default=None,
                   help="large file size, e.g. 1GiB (default), 256MiB")
    g.add_argument("--tree-files", type=int, default=None,
                   help="files in the no-change tree (default 4000; 510 with --quick)")
    g.add_argument("--profile", action="store_true",
                   help="also run one large backup under cProfile (out/backup.prof)")


def run(args) -> list:
    size = parse_size(args.big_size) if args.big_size else (64 * MiB if args.quick else GiB)
    tree_files = args.tree_files or (510 if args.quick else 4000)
    base = os.path.join(common.RUN_DIR, "backup")
    data = os.path.join(common.RUN_DIR, "data")
    size_txt = f"{size / GiB:g} GiB" if size >= GiB else f"{size / MiB:g} MiB"
    rows = []
    log(f"bench_backup: {size_txt} random file")
    big_dir = os.path.join(data, f"big-{size}")
    big = common.random_file(os.path.join(big_dir, "big.bin"), size)
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    up_b, up_wall_b, rss, rss_summary, pt, down_b, down_wall_b = [], [], [], [], [], [], []
    identical = None
    up_cpu, down_cpu = [], []
    try:
        tn.up()
        for i in range(args.repeat):
            home = common.new_home(os.path.join(base, f"cl{i}"), tn.dir)
            log(f"bench_backup: backup {size_txt} ({i + 1}/{args.repeat})")
            n0 = _node_cpu(tn)
            r = common.flud("backup", big_dir, "--home", home, "--json").check("flud backup")
            up_cpu.append((r.cpu, _node_cpu(tn) - n0))
            s = common.parse_backup(r.stdout)
            up_b.append(size / s["elapsed"] / MB)
            up_wall_b.append(size / r.wall / MB)
            rss.append(r.maxrss / MB)
            rss_summary.append(s.get("peak_rss", 0) / MB)
            pt.append(s.get("peak_transfer", 0) / MB)
            dest = os.path.join(base, f"rs{i}")
            shutil.rmtree(dest, ignore_errors=True)
            log(f"bench_backup: restore {size_txt} ({i + 1}/{args.repeat})")
            n0 = _node_cpu(tn)
            r = common.flud("restore", "--home", home, "--to", dest, "--json").check("flud restore")
            down_cpu.append((r.cpu, _node_cpu(tn) - n0))
            s = common.parse_restore(r.stdout)
            down_b.append(size / s["elapsed"] / MB)
            down_wall_b.append(size / r.wall / MB)
            if i == 0:
                identical = filecmp.cmp(big, os.path.join(dest, os.path.basename(big_dir),
                                                          "big.bin"), shallow=False)
            shutil.rmtree(dest, ignore_errors=True)
        if args.profile:
            _profile(tn, base, big_dir)
        rows += [
            Row(f"backup {size_txt} file, plaintext", up_b, "MB/s", 150, ">=",
                "Tahoe-LAFS 1.20: 27 MB/s",
                f"{args.nodes} nodes, k-of-n default; wall incl. process start "
                f"{common.fmt(common.median(up_wall_b))} MB/s"),
            Row(f"restore {size_txt} file, plaintext", down_b, "MB/s", 400, ">=",
                "Tahoe-LAFS 1.20: 107 MB/s",
                f"wall incl. process start {common.fmt(common.median(down_wall_b))} MB/s; "
                f"restored file {'identical' if identical else 'DIFFERENT'} to the source"),
            Row(f"client peak RSS, {size_txt} backup", rss, "MB", 48, "<=",
                "Tahoe client: 115 MB for 100 MiB",
                f"kernel high-water mark (wait4); flud's summary: peak RSS "
                f"{common.fmt(common.median(rss_summary))} MB, peak per transfer "
                f"{common.fmt(common.median(pt))} MB"),
            _cpu_row("backup", size, up_cpu),
            _cpu_row("restore", size, down_cpu),
        ]

        log(f"bench_backup: no-change backup of a {tree_files}-file tree")
        files, nbytes, tree = common.gen_home(os.path.join(data, f"home{tree_files}"),
                                              tree_files)
        home = common.new_home(os.path.join(base, "cl-tree"), tn.dir)
        first = common.flud("backup", tree, "--home", home, "--json").check("flud backup (first)")
        walls, internal, sent = [], [], []
        for _ in range(args.repeat):
            r = common.flud("backup", tree, "--home", home, "--json").check(
                "flud backup (no change)")
            s = common.parse_backup(r.stdout)
            walls.append(r.wall)
            internal.append(s.get("elapsed"))
            sent.append(s.get("sent", 0))
        fs = common.parse_backup(first.stdout)
        rows.append(Row(f"no-change backup, {files}-file tree (whole command)", walls, "s", 1,
                        "<=", "-",
                        f"{nbytes / MB:.0f} MB home mix; flud's own clock "
                        f"{common.fmt(common.median(internal))} s; sent "
                        f"{common.fmt(max(sent) / MB)} MB; first backup took "
                        f"{first.wall:.2f} s wall ({fs.get('stores')} STOREs)"))
    except common.BenchError as err:
        log(f"bench_backup: {err}")
        rows.append(Row("bench_backup failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        for name in os.listdir(base) if os.path.isdir(base) else []:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return rows


def _node_cpu(tn) -> float:
    """CPU seconds of all nodes together (STATS cpu_seconds)."""
    return sum(s["cpu_seconds"] for s in tn.stats() if s)


def _cpu_row(what: str, size: int, cpu: list) -> Row:
    """CPU per plaintext MB, client and nodes: what the machine must spend, so
    the rate it allows when nothing else runs (less sensitive to noise than
    wall time)."""
    per_mb = [(c + n) / (size / MB) * 1e3 for c, n in cpu]
    client = common.median([c / (size / MB) * 1e3 for c, _ in cpu])
    nodes = common.median([n / (size / MB) * 1e3 for _, n in cpu])
    cores = os.cpu_count() or 1
    total = common.median(per_mb)
    return Row(f"{what} CPU per plaintext MB (client + nodes)", per_mb, "ms/MB", None, None,
               "-", f"client {common.fmt(client)} ms/MB, nodes {common.fmt(nodes)} ms/MB: "
                    f"all {cores} cores busy with nothing else running would allow "
                    f"{common.fmt(cores * 1e3 / total) if total else '-'} MB/s")


def _profile(tn, base, big_dir) -> None:
    """One backup under cProfile; the top functions by cumulative and own time."""
    import pstats
    home = common.new_home(os.path.join(base, "cl-prof"), tn.dir)
    prof = os.path.join(common.OUT_DIR, "backup.prof")
    os.makedirs(common.OUT_DIR, exist_ok=True)
    log("bench_backup: backup under cProfile")
    r = common.run([common.PY, "-m", "cProfile", "-o", prof, "-m", "flud", "backup", big_dir,
                    "--home", home], timeout=3600)
    print(r.stdout)
    with open(os.path.join(common.OUT_DIR, "backup_profile.txt"), "w") as f:
        st = pstats.Stats(prof, stream=f)
        st.sort_stats("tottime").print_stats(30)
        st.sort_stats("cumulative").print_stats(40)
    log(f"bench_backup: profile in {common.OUT_DIR}/backup_profile.txt")


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
