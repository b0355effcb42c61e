"""What an excluded cache costs a backup's walk (issue 28: < 50 ms for a
CACHEDIR.TAG cache of 100,000 entries).

    .venv/bin/python tools/bench/bench_excludes.py [--entries N] [--repeat N]

The fixture home (tools/bench/home_tree.py) is built twice in a temporary
directory: once with a cache of N entries (default 100,000), once with the
same cache holding only its tag. Each is walked as a backup's first walk
walks it (flud/client/walk.py with the backup's exclude rules, every entry
stat'ed), with --exclude-caches; the cache's cost is the difference of the
median walk times. The same home walked without --exclude-caches says what
the cache would cost if it were not excluded. Walks alternate, so noise
from the shared machine falls on both. No node, no network.
Table: out/bench_excludes.txt.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row, log  # noqa: E402
from home_tree import MARKER, make_home  # noqa: E402

NAME = "bench_excludes"
TARGET_MS = 50.0
DEFAULT_ENTRIES = 100_000


def add_arguments(parser) -> None:
    g = parser.add_argument_group(NAME)
    g.add_argument("--cache-entries", dest="cache_entries", type=int, default=DEFAULT_ENTRIES,
                   metavar="N", help=f"entries in the excluded cache (default {DEFAULT_ENTRIES:,})")


def walk_once(root: str, exclude_caches: bool) -> tuple:
    """(seconds, entries kept) of one first walk of root."""
    from flud.client.excludes import ExcludeOptions, ExcludeRules, parse_size
    from flud.client.walk import walk

    rules = ExcludeRules.of(ExcludeOptions(exclude_caches=exclude_caches, if_present=(MARKER,),
                                           larger_than=parse_size("8M")))
    started = time.perf_counter()
    kept = sum(len(d.entries) for d in walk(root, (), lambda p, w: None, rules.lister(root)))
    return time.perf_counter() - started, kept


def run(args) -> list:
    entries = getattr(args, "cache_entries", DEFAULT_ENTRIES)
    repeat = max(3, getattr(args, "repeat", 5) or 5)
    base = tempfile.mkdtemp(prefix="flud-bench-excludes-")
    try:
        with_cache, tag_only = os.path.join(base, "with-cache"), os.path.join(base, "tag-only")
        log(f"building the fixture home with a cache of {entries:,} entries")
        make_home(with_cache, cache_entries=entries)
        make_home(tag_only, cache_entries=0)
        excluded, baseline, walked = [], [], []
        kept = {}
        walk_once(with_cache, True)   # warm the dentry cache: every walk then finds it warm
        walk_once(with_cache, False)
        for _ in range(repeat):
            seconds, kept["with"] = walk_once(with_cache, True)
            excluded.append(seconds)
            seconds, kept["tag"] = walk_once(tag_only, True)
            baseline.append(seconds)
            seconds, kept["all"] = walk_once(with_cache, False)
            walked.append(seconds)
        if kept["with"] != kept["tag"]:
            raise AssertionError(f"the excluded cache changed what was kept: {kept}")
        ms = lambda xs: [x * 1000 for x in xs]  # noqa: E731
        cost = [(a - b) * 1000 for a, b in zip(sorted(excluded), sorted(baseline))]
        rows = [
            Row(f"walk of the fixture home, cache of {entries:,} excluded", ms(excluded), "ms",
                note=f"{kept['with']} entries kept"),
            Row("walk of the same home, cache holding only its tag", ms(baseline), "ms"),
            Row(f"cost of the excluded cache ({entries:,} entries)", cost, "ms",
                TARGET_MS, "<=", "issue 28",
                note="difference of the sorted walk times, pairwise"),
            Row(f"walk with the cache not excluded ({entries:,} entries stat'ed)", ms(walked),
                "ms", note=f"{kept['all']} entries kept"),
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = run(args)
    title = f"{NAME} ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)"
    common.print_table(rows, title=title)
    common.save_table(NAME, rows, title)
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
