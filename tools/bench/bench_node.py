"""Node figures (issue 2): testnet start-up, idle RSS, wire throughput and latency.

    .venv/bin/python tools/bench/bench_node.py [--quick] [--repeat N] [--nodes 50]

- `flud testnet up --nodes 50` wall time (the whole command, until every node
  knows every other), on a fresh directory each time; median of --repeat.
- Idle RSS of one node: STATS memory.rss a few seconds after the testnet is up,
  median over the nodes (and of the repetitions); static_rss, USS and PSS too
  (nodes are forked from one launcher and share its pages: RSS counts shared
  pages in full, PSS splits them).
- Wire, client -> one node of that testnet on loopback (TLS, one connection):
  STORE and RETRIEVE of a 64 MiB share (MB/s each way, median of --repeat, at
  least 3), 1 KiB RETRIEVEs pipelined (256 in flight, 20,000 ops) and
  sequential round trips (ops/s and latency).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402

NAME = "bench_node"


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_node")
    g.add_argument("--share-mib", type=int, default=None, help="STORE/RETRIEVE share size (64)")
    g.add_argument("--small-ops", type=int, default=None, help="pipelined 1 KiB RETRIEVEs (20000)")
    g.add_argument("--inflight", type=int, default=256, help="pipelined requests in flight")
    g.add_argument("--seq-ops", type=int, default=None, help="sequential round trips (3000)")
    g.add_argument("--settle", type=float, default=None,
                   help="seconds between `up` and the idle RSS sample (5)")


def run(args) -> list:
    share_mib = args.share_mib or (16 if args.quick else 64)
    small_ops = args.small_ops or (3000 if args.quick else 20000)
    seq_ops = args.seq_ops or (500 if args.quick else 3000)
    settle = args.settle if args.settle is not None else (1.0 if args.quick else 5.0)
    base = os.path.join(common.RUN_DIR, "node")
    up_walls, up_reported, rss, static, uss, pss = [], [], [], [], [], []
    wire = None
    for i in range(args.repeat):
        tn = Testnet(os.path.join(base, f"tn{i}"), args.nodes,
                     noise=getattr(args, "noise", None))
        try:
            log(f"bench_node: testnet up --nodes {args.nodes} ({i + 1}/{args.repeat})")
            tn.up()
            up_walls.append(tn.up_result.wall)
            up_reported.append(tn.up_reported)
            time.sleep(settle)
            stats = [s for s in tn.stats() if s]
            rss.append(statistics.median(s["memory"]["rss"] for s in stats) / MB)
            static.append(statistics.median(s["memory"]["static_rss"] for s in stats) / MB)
            u, p = common.uss_pss(tn.pids())
            if u:
                uss.append(u / MB)
                pss.append(p / MB)
            if i == args.repeat - 1:
                log(f"bench_node: wire client -> node 0 ({share_mib} MiB shares, "
                    f"{small_ops} pipelined, {seq_ops} sequential)")
                wire = _wire(tn, share_mib, max(args.repeat, 3), small_ops, args.inflight,
                             seq_ops)
        finally:
            tn.down()
            tn.remove()

    up_note = (f"wall time of the command; flud's own figure (after start-up of the "
               f"launcher) median {common.fmt(common.median(up_reported))} s")
    rows = [
        Row(f"testnet up --nodes {args.nodes} (converged)", up_walls, "s", 10, "<=",
            "Tahoe-LAFS 1.20: 162 s", up_note),
        Row("idle node RSS (STATS memory.rss)", rss, "MB", 32, "<=", "Tahoe-LAFS: 96 MB",
            f"median over the {args.nodes} nodes, {settle:.0f} s after up; static_rss "
            f"{common.fmt(common.median(static))} MB; USS {common.fmt(common.median(uss))} MB, "
            f"PSS {common.fmt(common.median(pss))} MB (forked nodes share the launcher's pages)"),
    ]
    if wire is None or "error" in (wire or {}):
        note = f"wire client failed: {(wire or {}).get('error', 'not run')}"
        for fig in ("STORE", "RETRIEVE"):
            rows.append(Row(f"{fig} {share_mib} MiB share, client->node loopback", [], "MB/s",
                            400, ">=", "Storj 1 MiB chunks: 485 MB/s", note))
        return rows
    rows += [
        Row(f"STORE {share_mib} MiB share, client->node loopback", wire["store_mbs"], "MB/s",
            400, ">=", "Storj 1 MiB chunks: 485 MB/s",
            "one TLS connection, key checked (BLAKE3) and fsynced by the node before the "
            "answer; distinct random data each time"),
        Row(f"RETRIEVE {share_mib} MiB share, client->node loopback", wire["retrieve_mbs"],
            "MB/s", 400, ">=", "Storj 1 MiB chunks: 485 MB/s",
            "into client memory, one TLS connection (bytes checked after the clock)"),
        Row(f"1 KiB RETRIEVE pipelined ({args.inflight} in flight)", [wire["pipelined_ops"]],
            "ops/s", 5000, ">=", "-",
            f"{wire['pipelined_n']} ops on one connection, {wire['pipelined_errors']} errors"),
        Row("1 KiB RETRIEVE sequential (round trips)", [wire["seq_ops"]], "ops/s", None, None,
            "-", f"latency p50 {wire['seq_p50_us']:.0f} µs, p99 {wire['seq_p99_us']:.0f} µs "
                 f"over {wire['seq_n']} round trips"),
    ]
    return rows



def _wire(tn: Testnet, share_mib: int, reps: int, small_ops: int, inflight: int,
          seq_ops: int) -> dict:
    node = tn.nodes[0]
    argv = [common.PY, os.path.abspath(__file__), "--wire-client", tn.dir, node["node_id"],
            node["host"], str(node["port"]), str(share_mib), str(reps), str(small_ops),
            str(inflight), str(seq_ops)]
    r = common.run(argv, timeout=600)
    if r.rc != 0:
        return {"error": f"exit {r.rc}: {r.stderr[-800:]}"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"no JSON: {r.stdout[-400:]} {r.stderr[-400:]}"}


# ------------------------------------------------------------------ wire client

def _wire_client(directory, node_hex, host, port, share_mib, reps, small_ops, inflight,
                 seq_ops) -> dict:
    import blake3
    from twisted.internet import defer

    from flud.cli.runner import run_reactor
    from flud.protocol.client import ClientNet, NodeAddress

    size = share_mib * MiB
    address = NodeAddress(bytes.fromhex(node_hex), host, port)

    @defer.inlineCallbacks
    def job(reactor):
        net = ClientNet(reactor, os.path.join(directory, ".bench-client"))
        out = {"store_mbs": [], "retrieve_mbs": []}
        try:
            peer = yield net.peer(address)
            yield peer.ping()
            for _ in range(reps):
                data = os.urandom(size)
                key = blake3.blake3(data).digest()
                t0 = time.perf_counter()
                yield peer.store(key, data)
                out["store_mbs"].append(size / (time.perf_counter() - t0) / MB)
                t0 = time.perf_counter()
                got = yield peer.retrieve(key)
                out["retrieve_mbs"].append(size / (time.perf_counter() - t0) / MB)
                if bytes(got) != data:
                    raise RuntimeError("RETRIEVE returned other bytes")
                del got, data
                yield peer.delete(key)

            small = os.urandom(1024)
            skey = blake3.blake3(small).digest()
            yield peer.store(skey, small)

            # pipelined: keep `inflight` requests open on the one connection
            done = defer.Deferred()
            state = {"sent": 0, "ok": 0, "err": 0}

            def issue():
                state["sent"] += 1
                peer.retrieve(skey, 0, 1024).addCallbacks(answered, failed)

            def finished_one():
                if state["sent"] < small_ops:
                    issue()
                elif state["ok"] + state["err"] == small_ops and not done.called:
                    done.callback(None)

            def answered(data):
                if len(data) == 1024:
                    state["ok"] += 1
                else:
                    state["err"] += 1
                finished_one()

            def failed(f):
                state["err"] += 1
                finished_one()

            t0 = time.perf_counter()
            for _ in range(min(inflight, small_ops)):
                issue()
            yield done
            elapsed = time.perf_counter() - t0
            out.update(pipelined_ops=small_ops / elapsed, pipelined_n=small_ops,
                       pipelined_errors=state["err"])

            lat = []
            for _ in range(seq_ops):
                t = time.perf_counter()
                yield peer.retrieve(skey, 0, 1024)
                lat.append(time.perf_counter() - t)
            lat.sort()
            out.update(seq_ops=len(lat) / sum(lat), seq_n=len(lat),
                       seq_p50_us=lat[len(lat) // 2] * 1e6,
                       seq_p99_us=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6)
            yield peer.delete(skey)
        finally:
            net.close()
        return out

    return run_reactor(job)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--wire-client":
        a = sys.argv[2:]
        result = _wire_client(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]),
                              int(a[7]), int(a[8]))
        print(json.dumps(result))
        return 0
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
