#!/usr/bin/env python3
"""The network lab's figures: `make netlab` (or `python tools/netlab_run.py`).

Brings a lab up (default: 50 public hosts, two cone NATs, one symmetric,
one double), then measures and prints:

- how long the lab and its nodes took to come up;
- whether every router maps as its NAT kind says (flud/netlab/natcheck.py);
- from every node, a lookup of every other public node's id (flud/netlab/
  lookups.py): how long after the nodes were ready every lookup found its
  signed record (target 10 s), and the lookups' latency (p50, p80, p99;
  target p80 <= 500 ms with --rtt 50, the lab's links delayed);
- how long until every node knows every public node's record;
- each node's reachability verdict against the one its place calls for,
  and how long until all were known;
- each NATed node reached through the relay it reserved on, from a public
  host that cannot reach it directly;
- the share of node pairs that connect directly (at least one side public:
  the NATed side dials out), the pairs of NATed nodes a hole punch connects
  directly and those that stay relayed, and why (flud/netlab/punchcheck.py;
  the lab's NATed nodes dial each other through their relays for it);
- a client behind one NAT backs up a sample home, and a new home made from
  the exported key alone behind another NAT restores it: identical or not;
- port mapping, in a small lab of its own (tools/netlab_portmap.py): a node
  behind each kind of miniupnpd router, how it mapped and how soon, reached
  directly or not (skipped, saying why, where miniupnpd is missing).

Takes the lab down at the end, whatever happened (Ctrl-C too). Needs root,
iproute2 and nftables. Exits 1 if a verdict is wrong, a router misbehaves or
the restore differs.

    python tools/netlab_run.py [--public 50] [--nat cone:2,symmetric:1,double:1]
                               [--dir run/netlab] [--sample-mib 4] [--timeout 120]
                               [--rtt MS] [--prefix P]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flud.netlab import build, natcheck, punchcheck  # noqa: E402
from flud.netlab import lookups  # noqa: E402
from flud.netlab.lab import Lab  # noqa: E402
from flud.netlab.topology import NODE_PORT, parse_nat  # noqa: E402
from tools import netlab_portmap  # noqa: E402
from tools.sample_tree import make_sample_tree  # noqa: E402
from tools.treecmp import compare_trees  # noqa: E402

PASSPHRASE = "netlab passphrase, not a secret"
POLL = 1.0


def wait_for(lab, done, timeout):
    """Poll the lab's STATS until done(rows) or timeout; (rows, seconds)."""
    started = time.monotonic()
    while True:
        rows = lab.stats()
        if done(rows) or time.monotonic() - started > timeout:
            return rows, time.monotonic() - started
        time.sleep(POLL)


def in_host(lab, host, *args, timeout=600):
    argv = [sys.executable, "-m", "flud", *args]
    print(f"  [{host}] $ flud {' '.join(args)}", flush=True)
    started = time.monotonic()
    proc = lab.exec_argv(host, argv)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = -1
    return code, time.monotonic() - started


LOOKUP_P80_TARGET = 0.5
LATENCY_SAMPLE = 5


def record_lookups(lab, figures, ready, args) -> list:
    """Sweeps of lookups (every node -> every other public node's record)
    until one finds every record; the figures of the first that did."""
    sweeps, result = 0, None
    ready_at = time.time() - (time.monotonic() - ready)
    while time.monotonic() - ready < args.timeout:
        sweeps += 1
        found = lookups.sweep(lab, timeout=args.timeout)
        result = lookups.summary(found, since=ready_at)
        if result["found"] == result["lookups"]:
            break
    after = result["last"] if result and result["last"] is not None else time.monotonic() - ready
    ok = result is not None and result["lookups"] and result["found"] == result["lookups"]
    figures["records findable (each node looks up every public id)"] = (
        f"{result['found']} of {result['lookups']} found, the last {after:.1f} s after the "
        f"nodes were ready ({sweeps} sweep(s); target {args.findable_within:g} s)")
    if ok:
        # latency apart: one lookup at a time per origin, LATENCY_SAMPLE
        # targets each (the sweep's 200 lookups at once measured the
        # prober's own CPU as much); fresh prober processes, so each
        # origin's first lookups dial (TCP, TLS, HELLO) as a client's do
        timed = lookups.summary(lookups.sweep(lab, timeout=args.timeout, per_origin=1,
                                              sample=LATENCY_SAMPLE))
        figures["record lookup latency p50 / p80 / p99"] = (
            f"{timed['p50'] * 1000:.0f} / {timed['p80'] * 1000:.0f} / "
            f"{timed['p99'] * 1000:.0f} ms at {args.rtt:g} ms RTT ({timed['lookups']} lookups, "
            f"one at a time per origin, {timed['found']} found; p80 target "
            f"{LOOKUP_P80_TARGET * 1000:.0f} ms at 50 ms RTT)")
        figures["  the same, all lookups of the sweep at once"] = (
            f"{result['p50'] * 1000:.0f} / {result['p80'] * 1000:.0f} / "
            f"{result['p99'] * 1000:.0f} ms, median {result['queries_median']} FIND_NODE a lookup")
        result = dict(result, p80=timed["p80"])
    failures = []
    if not ok:
        failures.append(f"records not found: {result['missing'][:5] if result else 'no sweep'}")
    elif after > args.findable_within:
        failures.append(f"every record findable only {after:.1f} s after the nodes were ready")
    if ok and args.rtt and args.rtt <= 50 and result["p80"] > LOOKUP_P80_TARGET:
        failures.append(f"record lookup p80 {result['p80'] * 1000:.0f} ms at "
                        f"{args.rtt:g} ms RTT, over {LOOKUP_P80_TARGET * 1000:.0f} ms")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--public", type=int, default=50)
    parser.add_argument("--nat", default="cone:2,symmetric:1,double:1")
    parser.add_argument("--dir", default=os.path.join(os.getcwd(), "run", "netlab"))
    parser.add_argument("--sample-mib", type=int, default=4, help="the sample's largest file")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--no-portmap", action="store_true",
                        help="skip the port-mapping section (its own small lab)")
    parser.add_argument("--rtt", type=float, default=0.0,
                        help="round-trip time added between any two hosts, ms (docs/network-lab.md)")
    parser.add_argument("--prefix", default="", help="namespace name prefix (default: fl + 4 hex)")
    parser.add_argument("--findable-within", type=float, default=10.0,
                        help="target: seconds after the nodes were ready (default 10)")
    args = parser.parse_args()
    why = build.missing_prerequisites()
    if why:
        print(f"cannot run the lab: {why}", file=sys.stderr)
        return 2
    work = os.path.abspath(args.dir)
    if os.path.exists(work):
        Lab(os.path.join(work, "lab")).down()
        shutil.rmtree(work)
    os.makedirs(work)
    os.environ["FLUD_PASSPHRASE"] = PASSPHRASE
    os.environ[punchcheck.DIAL_RELAYED_ENV] = "1"   # every NATed pair meets: punched or not
    lab = Lab(os.path.join(work, "lab"))
    figures, failures = {}, []
    try:
        started = time.monotonic()
        state = lab.up(args.public, parse_nat(args.nat), delay_ms=args.rtt / 2,
                       prefix=args.prefix, deadline=started + args.timeout)
        ready = time.monotonic()
        figures["lab up (namespaces, routers, nodes ready)"] = f"{ready - started:.1f} s"
        if args.rtt:
            figures["delay between hosts"] = f"{args.rtt:g} ms RTT ({state.get('delay_by', 'netem')})"
        nodes = state["nodes"]
        public = [n for n in nodes if n["kind"] == "public"]
        natted = [n for n in nodes if n["kind"] != "public"]

        failures += record_lookups(lab, figures, ready, args)

        report = natcheck.report(state)
        figures["routers mapping as labelled"] = f"{sum(v == 'ok' for v in report.values())} of {len(report)}"
        failures += [f"router of {k}: {v}" for k, v in report.items() if v != "ok"]

        want = len(public) - 1
        rows, seconds = wait_for(lab, lambda rows: all(
            s and s["peers_known"] >= (want if n["kind"] == "public" else want + 1)
            for n, s in rows), args.timeout)
        figures["every public record known by every node"] = \
            f"{time.monotonic() - ready:.1f} s after all were ready"

        rows, seconds = wait_for(lab, lambda rows: all(
            s and s.get("reachability", {}).get("verdict") in ("public", "private")
            for _, s in rows), args.timeout)
        right = [n["name"] for n, s in rows if s and s["reachability"]["verdict"] == n["expected"]]
        figures["reachability verdicts right"] = f"{len(right)} of {len(rows)} ({seconds:.1f} s)"
        failures += [f"{n['name']} ({n['kind']}): verdict "
                     f"{(s or {}).get('reachability', {}).get('verdict')}, want {n['expected']}"
                     for n, s in rows if n["name"] not in right]
        relayed_ok, seconds = set(), 0.0
        started_relay = time.monotonic()
        while time.monotonic() - started_relay < args.timeout:
            found = lab.stats_through_relays()
            relayed_ok = {name for name, stats in found.items() if stats}
            if len(relayed_ok) == len(natted):
                break
            time.sleep(POLL)
        figures["NATed nodes reached through their relay"] = (
            f"{len(relayed_ok)} of {len(natted)} (from {public[0]['name']}, "
            f"{time.monotonic() - started_relay:.1f} s)")
        failures += [f"{n['name']} not reached through a relay" for n in natted
                     if n["name"] not in relayed_ok]
        pairs = len(nodes) * (len(nodes) - 1) // 2
        both_natted = len(natted) * (len(natted) - 1) // 2
        figures["node pairs connected directly (one side public)"] = (
            f"{pairs - both_natted} of {pairs} ({100 * (pairs - both_natted) / pairs:.1f} %: "
            f"the NATed side dials)")
        rows, seconds = wait_for(lab, lambda rows: punchcheck.settled(
            punchcheck.pair_outcomes(rows)), args.timeout)
        outcomes = punchcheck.pair_outcomes(rows)
        figures.update(punchcheck.figures(nodes, outcomes))
        figures["NATed pairs settled (punched or given up)"] = f"{seconds:.1f} s"
        failures += [f"NATed pair {a}-{b}: not settled" for (a, b), v in outcomes.items()
                     if v is None]

        if len(natted) >= 2:
            source = os.path.join(work, "sample")
            made = make_sample_tree(source, big_mib=args.sample_mib)
            backer, restorer = natted[0], natted[-1]
            join = f"{public[0]['host']}:{NODE_PORT}"
            home, key = os.path.join(work, "client"), os.path.join(work, "key.flud")
            new_home, restored = os.path.join(work, "client-new"), os.path.join(work, "restored")
            steps = [
                (backer, ("init", "--home", home, "--join", join)),
                (backer, ("backup", source, "--home", home)),
                (backer, ("key", "export", "--home", home, key)),
                (restorer, ("init", "--home", new_home, "--import-key", key, "--join", join)),
                (restorer, ("restore", "--home", new_home, "--to", restored)),
            ]
            for node, step in steps:
                code, seconds = in_host(lab, node["name"], *step)
                figures[f"{step[0]} from {node['name']} ({node['kind']} NAT)"] = \
                    f"{seconds:.1f} s, exit {code}"
                if code != 0:
                    failures.append(f"`flud {step[0]}` in {node['name']} exited {code}")
                    break
            else:
                problems = compare_trees(source, os.path.join(restored, os.path.basename(source)))
                figures["restore behind another NAT, from the key alone"] = (
                    f"identical ({made['files']} files, {made['bytes'] / 1e6:.1f} MB)"
                    if not problems else f"{len(problems)} differences: {problems[:3]}")
                if problems:
                    failures.append("the restored tree differs")
    finally:
        stopped, deleted = lab.down()
        print(f"lab down: {stopped} node processes stopped, {deleted} namespaces deleted")
    portmap = {}
    if not args.no_portmap:    # a small lab of its own, after this one is down
        portmap, failed = netlab_portmap.measure(os.path.join(work, "portmap-lab"))
        failures += failed
    print(f"\nnetwork lab: {args.public} public nodes, NATed sites {args.nat}")
    for name, value in figures.items():
        print(f"  {name:48} {value}")
    if portmap:
        print("\nport mapping (miniupnpd routers: a node behind each, mapped and reached directly?)")
        for name, value in portmap.items():
            print(f"  {name:48} {value}")
    for failure in failures:
        print(f"  FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
