"""Small-file figures (issue 4): the seed's experiment, its rate table, a 4000-file home.

    .venv/bin/python tools/bench/bench_small.py [--quick] [--repeat N]

- The seed's 51-file home mix (shared/tools/gen_mix.py, 3,200,000 bytes),
  backed up with aggregation (the default) and without it (small_file_limit 1:
  every file segment-coded and sent as n share STOREs), each time from a fresh
  client home. Wall time of the whole `flud backup` command, effective kbps
  (plaintext bits / wall), STORE messages (flud's summary), bytes stored (sum
  over the nodes of the STATS bytes_stored delta: tar headers, padding and the
  snapshot's manifest included) and its ratio to plaintext x n/k.
- The seed's table, rate versus file size (28K ... 60M, binary units as `ls -h`
  printed them in 2006), with and without aggregation: each row backs up a
  directory of files of one size (enough files for ~8 MB, at least one).
  Table in out/rate_vs_size.txt, plot in out/rate_vs_size.png.
- A generated home of >= 4000 files in that mix (gen_mix.py with 79 seeds):
  backup and restore wall time (whole commands). The restore is compared
  with the source.
- Per-file cost, the B of Tahoe's per-file model A x size + B: 4000 files of
  1 KiB backed up (and restored) from a fresh client home; the whole
  command's wall / 4000 is the figure. The note adds the marginal cost,
  (wall(4000) - wall(1 file)) / 3999: one more small file, with process
  start, connections and the manifest taken out.
"""
from __future__ import annotations

import math
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402

NAME = "bench_small"

# The seed's table (shared/seeds/004...): size label, bytes, seconds, rate text.
SEED_TABLE = [
    ("28K", 28 << 10, 7, "33 kbps"), ("316K", 316 << 10, 7, "370 kbps"),
    ("844K", 844 << 10, 7, "987 kbps"), ("1.2M", int(1.2 * MiB), 7, "1.4 mbps"),
    ("5.1M", int(5.1 * MiB), 12, "3.6 mbps"), ("7.7M", int(7.7 * MiB), 16, "4.0 mbps"),
    ("10M", 10 * MiB, 18, "4.7 mbps"), ("25M", 25 * MiB, 30, "7.0 mbps"),
    ("35M", 35 * MiB, 47, "6.2 mbps"), ("60M", 60 * MiB, 87, "5.8 mbps"),
]
MODES = (("with aggregation", None), ("without aggregation", 1))


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_small")
    g.add_argument("--home-files", type=int, default=None,
                   help="files in the generated home (default 4000; 510 with --quick)")
    g.add_argument("--row-bytes", type=float, default=None,
                   help="bytes per rate-table row (default 8e6; 2e6 with --quick)")


def run(args) -> list:
    base = os.path.join(common.RUN_DIR, "small")
    data = os.path.join(common.RUN_DIR, "data")
    rows = []
    if not common.have_gen_mix():
        note = f"skipped: {common.GEN_MIX} is missing"
        log(f"bench_small: {note}")
        return [Row("51-file home mix, backup with aggregation", [], "s", 0.5, "<=",
                    "flud 2006: 406 s; Tahoe-LAFS 1.20: 3.8 s", note)]
    tn = Testnet(os.path.join(base, "tn"), args.nodes, noise=getattr(args, "noise", None))
    try:
        tn.up()
        rows += _mix(args, tn, base, data)
        rows += _rate_table(args, tn, base, data)
        rows += _home(args, tn, base, data)
        rows += _per_file(args, tn, base, data)
    except common.BenchError as err:
        log(f"bench_small: {err}")
        rows.append(Row("bench_small failed", [], note=str(err)[:300]))
    finally:
        tn.down()
        tn.remove()
        shutil.rmtree(base, ignore_errors=True)
    return rows


def _backup_fresh(tn, base, name, src, small_limit, measure_stored=True) -> dict:
    home = common.new_home(os.path.join(base, name), tn.dir, small_file_limit=small_limit)
    cfg = common.home_config(home)
    before = tn.bytes_stored() if measure_stored else 0
    r = common.flud("backup", src, "--home", home, "--json").check("flud backup")
    after = tn.bytes_stored() if measure_stored else 0
    s = common.parse_backup(r.stdout)
    s.update(wall=r.wall, stored=after - before, k=cfg["k"], n=cfg["n"], home=home,
             maxrss=r.maxrss)
    return s


def _mix(args, tn, base, data) -> list:
    mix = common.gen_mix(os.path.join(data, "mix51"))
    files, plain = common.tree_size(mix)
    rows = []
    for label, limit in MODES:
        walls, kbps, stores, stored, ratio, internal = [], [], [], [], [], []
        for i in range(args.repeat):
            log(f"bench_small: 51-file mix {label} ({i + 1}/{args.repeat})")
            s = _backup_fresh(tn, base, f"mix-{limit}-{i}", mix, limit)
            walls.append(s["wall"])
            internal.append(s.get("elapsed"))
            kbps.append(plain * 8 / s["wall"] / 1e3)
            stores.append(s.get("stores"))
            stored.append(s["stored"])
            ratio.append(s["stored"] / (plain * s["n"] / s["k"]))
            k, n = s["k"], s["n"]
            tars = s.get("tars")
        agg = limit is None
        rows += [
            Row(f"51-file mix backup {label} (whole command)", walls, "s",
                0.5 if agg else None, "<=" if agg else None,
                "flud 2006: 406 s; Tahoe-LAFS 1.20: 3.8 s",
                f"{files} files, {plain:,} B; flud's own clock "
                f"{common.fmt(common.median(internal))} s"),
            Row(f"51-file mix {label}: effective rate", kbps, "kbps", None, None,
                "flud 2006: 65 kbps", "plaintext bits / whole-command wall time"),
            Row(f"51-file mix {label}: STORE messages", stores, "", None, None, "-",
                f"{tars} of them tars" if agg else f"k={k} n={n}: n per file segment"),
            Row(f"51-file mix {label}: bytes stored", [v / MB for v in stored], "MB", None,
                None, "-", "sum of the nodes' bytes_stored deltas (includes the manifest)"),
            Row(f"51-file mix {label}: stored / (plaintext x n/k)", ratio, "",
                1.25 if agg else None, "<=" if agg else None, "-",
                f"n/k = {n}/{k}; tar headers, padding and the snapshot manifest included"),
        ]
    return rows


def _rate_table(args, tn, base, data) -> list:
    row_bytes = args.row_bytes or (2e6 if args.quick else 8e6)
    table = []
    for label, size, seed_s, seed_rate in SEED_TABLE:
        count = max(1, math.ceil(row_bytes / size))
        src = os.path.join(data, f"rate-{size}x{count}")
        _same_size_files(src, size, count)
        cells = {}
        for mode, limit in MODES:
            walls, internal = [], []
            for i in range(args.repeat):
                log(f"bench_small: rate table {label} x {count} {mode} ({i + 1}/{args.repeat})")
                s = _backup_fresh(tn, base, f"rate-{size}-{limit}-{i}", src, limit,
                                  measure_stored=False)
                walls.append(s["wall"])
                internal.append(s.get("elapsed") or s["wall"])
                shutil.rmtree(s["home"], ignore_errors=True)
            w, e = common.median(walls), common.median(internal)
            cells[mode] = {"wall_s": w, "elapsed_s": e,
                           "mbps_wall": size * count * 8 / w / 1e6,
                           "mbps_job": size * count * 8 / e / 1e6 if e else None,
                           "s_per_file": w / count, "stores": s.get("stores")}
        table.append({"label": label, "size": size, "files": count, "seed_s": seed_s,
                      "seed_rate": seed_rate, "seed_mbps": size * 8 / seed_s / 1e6, **cells})
    text = _table_text(table)
    print(text)
    os.makedirs(common.OUT_DIR, exist_ok=True)
    with open(os.path.join(common.OUT_DIR, "rate_vs_size.txt"), "w") as f:
        f.write(text + "\n")
    common.save_json(os.path.join(common.OUT_DIR, "rate_vs_size.json"), table)
    _plot(table, os.path.join(common.OUT_DIR, "rate_vs_size.png"), args.nodes)
    first, last = table[0], table[-1]
    w, wo = first["with aggregation"], first["without aggregation"]
    return [
        Row(f"rate, {first['files']} files of {first['label']}, with aggregation",
            [w["mbps_wall"]], "Mbps", None, None, f"flud 2006: {first['seed_rate']}",
            f"whole command {w['wall_s']:.2f} s, {1e3 * w['s_per_file']:.1f} ms per file; "
            f"without aggregation {wo['mbps_wall']:.1f} Mbps "
            f"({1e3 * wo['s_per_file']:.1f} ms per file); table: out/rate_vs_size.txt"),
        Row(f"rate, {last['files']} file of {last['label']}",
            [last["with aggregation"]["mbps_wall"]], "Mbps", None, None,
            f"flud 2006: {last['seed_rate']}", "whole command; plot: out/rate_vs_size.png"),
    ]


def _same_size_files(src: str, size: int, count: int) -> None:
    stamp = src + ".ok"
    if os.path.exists(stamp) and os.path.isdir(src):
        return
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    for i in range(count):
        with open(os.path.join(src, f"f{i:04d}.bin"), "wb") as f:
            f.write(os.urandom(size))
    open(stamp, "w").close()


def _table_text(table) -> str:
    head = ("size", "files", "agg: wall s", "agg: Mbps", "agg: ms/file", "no agg: wall s",
            "no agg: Mbps", "no agg: ms/file", "2006: s/file", "2006: rate")
    lines = []
    for t in table:
        w, wo = t["with aggregation"], t["without aggregation"]
        lines.append((t["label"], str(t["files"]), f"{w['wall_s']:.2f}", f"{w['mbps_wall']:.1f}",
                      f"{1e3 * w['s_per_file']:.1f}", f"{wo['wall_s']:.2f}",
                      f"{wo['mbps_wall']:.1f}", f"{1e3 * wo['s_per_file']:.1f}",
                      str(t["seed_s"]), t["seed_rate"]))
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
    out = ["rate versus file size (whole `flud backup` command; Mbps = 10^6 bits/s)",
           "  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in lines]
    return "\n".join(out)


def _plot(table, path, nodes) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("bench_small: matplotlib missing, no plot")
        return
    sizes = [t["size"] for t in table]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    try:
        ax.plot(sizes, [t["with aggregation"]["mbps_wall"] for t in table], "o-",
                label="flud, with aggregation")
        ax.plot(sizes, [t["without aggregation"]["mbps_wall"] for t in table], "s-",
                label="flud, without aggregation")
        ax.plot(sizes, [t["seed_mbps"] for t in table], "x--", color="grey",
                label="flud 2006 (seed, one file)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("file size (bytes)")
        ax.set_ylabel("backup rate, Mbps (whole command)")
        ax.set_title(f"Backup rate versus file size, {nodes}-node local testnet")
        ax.grid(alpha=0.3, which="both")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def _home(args, tn, base, data) -> list:
    want = args.home_files or (510 if args.quick else 4000)
    log(f"bench_small: generated home of >= {want} files")
    files, nbytes, tree = common.gen_home(os.path.join(data, f"home{want}"), want)
    back, rest, per_file, problems, rss = [], [], [], None, []
    for i in range(args.repeat):
        log(f"bench_small: home of {files} files, backup + restore ({i + 1}/{args.repeat})")
        s = _backup_fresh(tn, base, f"home-{i}", tree, None, measure_stored=False)
        back.append(s["wall"])
        rss.append(s["maxrss"])
        per_file.append(s["wall"] / files * 1e3)
        dest = os.path.join(base, f"home-rs{i}")
        shutil.rmtree(dest, ignore_errors=True)
        r = common.flud("restore", "--home", s["home"], "--to", dest, "--json").check("flud restore")
        rest.append(r.wall)
        rs = common.parse_restore(r.stdout)
        if i == 0:
            from tools.treecmp import compare_trees
            problems = compare_trees(tree, os.path.join(dest, os.path.basename(tree)))
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(s["home"], ignore_errors=True)
    same = "restore identical to the source" if not problems else \
        f"{len(problems)} DIFFERENCES, e.g. {problems[:3]}"
    return [
        Row(f"home of {files} files ({nbytes / MB:.0f} MB): backup (whole command)", back, "s",
            5, "<=", "-", f"{s.get('stores')} STOREs ({s.get('tars')} tars); flud's own clock "
                          f"{common.fmt(s.get('elapsed'))} s; client peak RSS "
                          f"{common.fmt(common.median(rss) / MB)} MB"),
        Row(f"home of {files} files: restore (whole command)", rest, "s", 5, "<=", "-",
            f"{rs.get('retrieves')} RETRIEVEs; {same}"),
        Row(f"home of {files} files: backup wall / files", per_file, "ms", None, None, "-",
            "bytes included: the mix is 63 kB per file on average"),
    ]


def _per_file(args, tn, base, data) -> list:
    many = 510 if args.quick else 4000
    trees = {}
    for count in (1, many):
        tree = os.path.join(data, f"kib-{count}")
        if not os.path.isdir(tree):
            rng = random.Random(count)  # incompressible, the same every run
            for i in range(count):
                folder = os.path.join(tree + ".tmp", f"d{i // 200:03d}")
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, f"f{i:05d}"), "wb") as f:
                    f.write(rng.randbytes(1024))
            os.rename(tree + ".tmp", tree)
        trees[count] = tree
    walls = {1: ([], []), many: ([], [])}
    for i in range(args.repeat):
        for count, tree in trees.items():
            log(f"bench_small: {count} x 1 KiB, backup + restore ({i + 1}/{args.repeat})")
            s = _backup_fresh(tn, base, f"kib-{count}-{i}", tree, None, measure_stored=False)
            dest = os.path.join(base, f"kib-rs-{count}-{i}")
            shutil.rmtree(dest, ignore_errors=True)
            r = common.flud("restore", "--home", s["home"], "--to", dest).check("flud restore")
            walls[count][0].append(s["wall"])
            walls[count][1].append(r.wall)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(s["home"], ignore_errors=True)
    rows = []
    for what, j in (("backup", 0), ("restore", 1)):
        per_file = [w / many * 1e3 for w in walls[many][j]]
        one = common.median(walls[1][j])
        marginal = (common.median(walls[many][j]) - one) / (many - 1) * 1e3
        rows.append(Row(f"per-file cost, {many} x 1 KiB: {what} (whole command / files)",
                        per_file, "ms", 0.5, "<=", "Tahoe-LAFS: 40 ms per 1 KiB file",
                        f"whole command {common.fmt(common.median(walls[many][j]))} s; "
                        f"1 file: {common.fmt(one)} s; marginal (without process start, "
                        f"connections, manifest) {common.fmt(marginal)} ms per file"))
    return rows


def main() -> int:
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
