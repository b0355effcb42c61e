"""`flud lab up|status|exec|down`: the network lab (flud/netlab/): nodes in
network namespaces on one machine, public and behind NAT routers.

The harness is imported when a command runs: every `flud` process builds
this parser, a node too."""
import json
import os
import sys
import time

from flud.cli.exits import EXIT_ERROR, EXIT_NOT_DONE, EXIT_OK


def add_lab_commands(sub) -> None:
    lab = sub.add_parser("lab", help="a network lab: nodes in namespaces behind NAT routers "
                                     "(root)").add_subparsers(dest="action", required=True)
    up = lab.add_parser("up", help="make the namespaces and routers and start a node in each host")
    up.add_argument("--dir", required=True, help="the lab's directory (lab.json, node homes)")
    up.add_argument("--public", type=int, default=3, help="public hosts (default 3)")
    up.add_argument("--nat", default="", metavar="KIND:N,...",
                    help="NATed sites, one node each: cone, symmetric, double, or a router "
                         "that maps ports (miniupnpd): upnp, natpmp, igd "
                         "(e.g. cone:2,symmetric:1,double:1)")
    up.add_argument("--delay", type=float, default=0.0, metavar="MS",
                    help="round-trip time added between any two hosts, in ms (tc netem)")
    up.add_argument("--prefix", default="", help="namespace name prefix (default: fl + 4 hex)")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the nodes")
    up.set_defaults(handler=cmd_up)
    status = lab.add_parser("status", help="one row per node, asked from inside the lab")
    status.add_argument("--dir", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)
    down = lab.add_parser("down", help="stop the lab's nodes and delete its namespaces")
    down.add_argument("--dir", required=True)
    down.set_defaults(handler=cmd_down)
    run = lab.add_parser("exec", help="run a command inside a host's namespace "
                                      "(e.g. a client behind a NAT)")
    run.add_argument("--dir", required=True)
    run.add_argument("host", help="a host of the lab: h000, n01, ...")
    run.add_argument("argv", nargs="+", metavar="COMMAND")
    run.set_defaults(handler=cmd_exec)


def cmd_up(args) -> int:
    from flud.netlab.build import LabError, missing_prerequisites
    from flud.netlab.lab import Lab, lab_file
    from flud.netlab.topology import LabSpecError, parse_nat

    why = missing_prerequisites()
    if why:
        print(f"cannot bring a lab up: {why}", file=sys.stderr)
        return EXIT_ERROR
    try:
        sites = parse_nat(args.nat)
        lab = Lab(args.dir)
        started = time.monotonic()
        state = lab.up(args.public, sites, delay_ms=args.delay / 2, prefix=args.prefix,
                       deadline=started + args.timeout)
    except (LabSpecError, LabError, KeyboardInterrupt) as err:
        print(f"lab did not come up: {err}", file=sys.stderr)
        return EXIT_NOT_DONE
    print(f"lab up in {time.monotonic() - started:.1f} s: {args.public} public, "
          f"{len(state['nodes']) - args.public} NATed node(s), prefix {state['prefix']}. "
          f"Details: {lab_file(lab.directory)}")
    for node in state["nodes"][:1] + [n for n in state["nodes"] if n["kind"] != "public"]:
        print(f"  {node['name']:5} {node['kind']:9} {node['host']}:{node['port']} "
              f"in {node['namespace']}")
    return EXIT_OK


def cmd_status(args) -> int:
    from flud.netlab.build import LabError
    from flud.netlab.lab import Lab

    lab = Lab(args.dir)
    if not lab.state or not lab.state.get("nodes"):
        print(f"no lab in {lab.directory}")
        return EXIT_NOT_DONE
    try:
        rows = lab.stats()
    except LabError as err:
        print(err, file=sys.stderr)
        return EXIT_NOT_DONE
    if args.json:
        for node, stats in rows:
            print(json.dumps({"name": node["name"], "kind": node["kind"],
                              "expected": node["expected"], "stats": stats}))
    else:
        print(f"{'host':5} {'kind':9} {'address':21} {'alive':5} {'peers':>5} "
              f"{'reachability':12} {'expected':8} published")
        for node, stats in rows:
            alive = "yes" if stats else "no"
            peers = stats["peers_known"] if stats else "-"
            reach = (stats or {}).get("reachability", {})
            published = " ".join(p if not p.startswith("relay:") else p[:18] + "..."
                                 for p in reach.get("published", []))
            print(f"{node['name']:5} {node['kind']:9} {node['host'] + ':' + str(node['port']):21} "
                  f"{alive:5} {peers:>5} {reach.get('verdict', '-'):12} {node['expected']:8} "
                  f"{published}")
    alive = sum(1 for _, s in rows if s)
    print(f"{alive} of {len(rows)} nodes alive", file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK if alive == len(rows) else EXIT_NOT_DONE


def cmd_down(args) -> int:
    from flud.netlab.build import LabError
    from flud.netlab.lab import Lab

    lab = Lab(args.dir)
    if not lab.state:
        print(f"no lab in {lab.directory}")
        return EXIT_NOT_DONE
    try:
        stopped, deleted = lab.down()
    except LabError as err:
        print(f"lab not fully down: {err}", file=sys.stderr)
        return EXIT_NOT_DONE
    print(f"stopped {stopped} node process(es), deleted {deleted} namespace(s)")
    return EXIT_OK


def cmd_exec(args) -> int:
    from flud.netlab.build import LabError
    from flud.netlab.lab import Lab

    lab = Lab(args.dir)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    try:
        proc = lab.exec_argv(args.host, argv)
    except LabError as err:
        print(err, file=sys.stderr)
        return EXIT_ERROR
    except FileNotFoundError as err:
        print(f"cannot run {argv[0]!r}: {err.strerror}", file=sys.stderr)
        return EXIT_ERROR
    return proc.wait()
