"""Where a whole `flud` command's wall time goes, phase by phase.

    .venv/bin/python tools/bench/phase_trace.py OUT.json -- backup PATH --home H

Runs the command in this process, as `python -m flud` would, with timing
wrappers around the functions that begin and end each phase (nothing of
flud is changed on disk; only the functions below are wrapped, in the
modules that call them). Writes OUT.json: {"marks": [[name, seconds since the
process started], ...], "phases": [[phase, seconds], ...], "exit": code}.
The parent measures the whole command's wall time; the last phase ("exit")
is what the parent saw after the last mark (interpreter teardown).

Phases of a backup (each from the end of the one before):
  interpreter   process start -> this script's first line (python, site)
  parser        flud's import hook, every command's parser built
  cli           the command's imports, home and key load (ClientHome), the
                job lock, the reactor's import (`flud ls`: its whole work,
                shown as "exit" since no job runs)
  setup         the job's code, the CPU pool, TLS contexts (Network), trust
  bootstrap     asking the bootstrap nodes for their records
  dht walks     the random walks discover() waits for (when it does)
  root lookup   adopt_head: the nodes' root record, checked against this home's head
  scan          the first walk of the source against the index
  transfer      small and large files sent, what landed written to the index
  tree          the directory records built and sealed
  map + head    publish_tree: map page, snapshot record, index, root checked again and put
  finish        end_run, the second lease check, the summary printed (a
                restore: the whole restore, from the end of the discovery)
  teardown      connections closed, the reactor stopped
  exit          the interpreter's teardown (and, without a job, all its work)
Network spans that overlap those phases are kept apart ("spans"): the
discovery, the random walks, the lease renewal, the head write. For `ls` and
`restore` the phases that do not happen are absent.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import time

_HZ = os.sysconf("SC_CLK_TCK")


def _since_start() -> float:
    """Seconds since this process started (the kernel's start time)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / _HZ


_ORIGIN = time.monotonic() - _since_start()
MARKS: list = []


def mark(name: str) -> None:
    MARKS.append([name, time.monotonic() - _ORIGIN])


mark("interpreter")


SPANS: list = []   # [name, start, end]: phases that may overlap others


def _span(owner, attr: str, name: str) -> None:
    """owner.attr's calls, from call to result, as spans named `name`."""
    original = getattr(owner, attr)

    def wrapped(*args, **kwargs):
        start = time.monotonic() - _ORIGIN
        result = original(*args, **kwargs)

        def done(value):
            SPANS.append([name, round(start, 4), round(time.monotonic() - _ORIGIN, 4)])
            return value
        if hasattr(result, "addBoth"):
            result.addBoth(done)
        else:
            done(None)
        return result
    wrapped.__wrapped__ = original
    setattr(owner, attr, wrapped)


def _wrap_deferred(owner, attr: str, begin: str | None, end: str) -> None:
    """owner.attr (returning a Deferred, or a plain value) marks `begin`
    when called and `end` when its result is there."""
    original = getattr(owner, attr)

    def wrapped(*args, **kwargs):
        if begin:
            mark(begin)
        result = original(*args, **kwargs)
        if hasattr(result, "addBoth"):
            def done(value):
                mark(end)
                return value
            result.addBoth(done)
        else:
            mark(end)
        return result
    wrapped.__wrapped__ = original
    setattr(owner, attr, wrapped)


def _after_import(module_name: str, then) -> None:
    """Call then() right after module_name is first imported (by the
    command itself: the wrappers must not move an import into another phase)."""
    import importlib.abc
    import importlib.machinery

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                return None
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                then(module)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, Hook())


def _install_jobs(jobs) -> None:
    import flud.cli.runner as runner

    original_run_reactor = jobs.run_reactor

    def run_reactor(fn, *args, **kwargs):
        mark("cli")
        try:
            return original_run_reactor(fn, *args, **kwargs)
        finally:
            mark("teardown")
    jobs.run_reactor = run_reactor
    runner.run_reactor = run_reactor
    original_job, original_load = jobs._job, jobs.load_job_code

    def job(*a, **k):
        d = original_job(*a, **k)
        d.addBoth(lambda v: (mark("finish"), v)[1])
        return d
    jobs._job = job

    def load_job_code(name):
        original_load(name)
        _install_network()
        if name == "backup":
            _install_backup()
    jobs.load_job_code = load_job_code


def _install_network() -> None:
    from flud.client import network as network_mod

    original_discover = network_mod.Network.discover
    original_walk = network_mod.Network.walk

    def discover(self, *a, **k):
        mark("setup")
        return original_discover(self, *a, **k)

    def walk(self, *a, **k):
        mark("bootstrap")
        d = original_walk(self, *a, **k)
        d.addBoth(lambda v: (mark("dht walks"), v)[1])
        return d
    network_mod.Network.discover = discover
    network_mod.Network.walk = walk
    # spans, beside the marks: what overlaps what
    _span(network_mod.Network, "discover", "discover (bootstrap + waited walks)")
    if hasattr(network_mod.Network, "walk_beside"):
        _span(network_mod.Network, "walk_beside", "dht walk (beside the job)")
    _span(network_mod.Network, "walk", "dht walks (waited for)")
    from flud.client import lease_renewal
    import flud.cli.jobs as jobs
    _span(jobs, "_renew_leases", "lease renewal")
    del lease_renewal


def _install_backup() -> None:
    import flud.client.backup.backup_job as backup_job
    from flud.client.backup import tree_writer
    _span(tree_writer, "write_head", "head write (stores, root checked again, put)")
    _wrap_deferred(backup_job, "adopt_head", None, "root lookup")
    _wrap_deferred(backup_job.Backup, "_find_changes", None, "scan")
    _wrap_deferred(backup_job, "settle_all", None, "transfer")
    _wrap_deferred(tree_writer.TreeWriter, "build", None, "tree")
    _wrap_deferred(backup_job, "publish_tree", None, "map + head")


def phases(marks) -> list:
    out, last = [], 0.0
    for name, t in marks:
        out.append([name, round(t - last, 4)])
        last = t
    return out


def main() -> int:
    out_path = sys.argv[1]
    argv = sys.argv[sys.argv.index("--") + 1:]
    sys.argv = ["flud", *argv]

    def save():
        mark("exit")
        with open(out_path, "w") as f:
            json.dump({"marks": MARKS, "phases": phases(MARKS), "spans": SPANS,
                       "argv": argv}, f)
    atexit.register(save)
    _after_import("flud.cli.jobs", _install_jobs)
    import flud.cli.main as cli_main
    original_build = cli_main.build_parser

    def build_parser():
        parser = original_build()
        mark("parser")
        return parser
    cli_main.build_parser = build_parser
    return cli_main.main()


if __name__ == "__main__":
    sys.exit(main())
