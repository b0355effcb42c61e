"""Hostile peers (issue 16, items 4-5): what a node keeps for honest clients.

    .venv/bin/python tools/bench/bench_hostile.py [--quick] [--repeat N]

Each repetition starts one fresh node (a 1-node testnet, 10 GiB of capacity)
and measures, in this order:

- RSS of the node idle; at its peak while a hostile client opens 2,000 TLS
  connections that complete the handshake and never send a byte; and once
  they have gone (the node's handshake timeout closed them, or it refused
  them at the door). Target: gone, within 2 MB of idle.
- Free space left to honest clients while a hostile client (one identity,
  5 connections, 64 silent 32 MiB streamed STOREs on each: 10 GiB declared,
  the whole capacity) holds every reservation the node grants it; then an
  honest client's 8 MiB STORE. Target: >= 90% of capacity free.

Medians over --repeat (3). The hostile and honest clients run in
subprocesses of this script (`hold`, `flood`, `honest` modes, below), which
tests/integration/test_hostile_peers.py uses too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MB, MiB, Row, Testnet, log  # noqa: E402

from flud import procfs  # noqa: E402

NAME = "bench_hostile"
SCRIPT = os.path.abspath(__file__)
FLOOD = 2000
FLOOD_CONCURRENCY = 200       # handshakes in flight at once from the flood client
HANDSHAKE_TIMEOUT = 10.0      # docs/protocol.md: the node closes a silent connection then
GONE_AFTER = HANDSHAKE_TIMEOUT + 5.0  # ... and trims its heap a second after the last
HOLD_CONNECTIONS = 5
HOLD_REQUESTS = 64
HOLD_SIZE = 32 * MiB
HONEST_SIZE = 8 * MiB
ANSWER_TIMEOUT = 30.0


def add_arguments(parser) -> None:
    g = parser.add_argument_group("bench_hostile")
    g.add_argument("--flood", type=int, default=None, help=f"silent TLS connections ({FLOOD})")
    g.add_argument("--hostile-settle", dest="hostile_settle", type=float, default=3.0,
                   help="seconds between the node's start and its idle RSS sample")


def run(args) -> list:
    flood = args.flood or (500 if args.quick else FLOOD)
    idle, peak, gone, free, honest_ok, notes = [], [], [], [], 0, []
    for i in range(args.repeat):
        tn = Testnet(os.path.join(common.RUN_DIR, "hostile", f"tn{i}"), 1,
                     noise=getattr(args, "noise", None))
        try:
            log(f"bench_hostile: node up ({i + 1}/{args.repeat})")
            tn.up()
            node = tn.nodes[0]
            time.sleep(args.hostile_settle)
            rss = flood_rss(node["pid"], node["host"], node["port"], flood)
            idle.append(rss["idle"] / MB)
            peak.append(rss["peak"] / MB)
            gone.append(rss["gone"] / MB)
            notes.append(f"{rss['opened']} opened")
            held = hold_space(tn, node, os.path.join(tn.dir, "mallory"),
                              os.path.join(tn.dir, "alice"))
            free.append(held["free_pct"])
            honest_ok += held["honest"] == "ok"
        finally:
            tn.down()
            tn.remove()
    over = [g - i for g, i in zip(gone, idle)]
    return [
        Row("free space for honest clients, hostile holding reservations", free, "%", 90, ">=",
            "-", f"one identity, {HOLD_CONNECTIONS} connections x {HOLD_REQUESTS} silent "
                 f"{HOLD_SIZE // MiB} MiB STOREs (the whole capacity declared); an honest "
                 f"{HONEST_SIZE // MiB} MiB STORE beside it succeeded {honest_ok}/{args.repeat}"),
        Row("node RSS idle", idle, "MB", None, None, "-", "a 1-node testnet, before the flood"),
        Row(f"node RSS with {flood:,} silent TLS connections (peak)", peak, "MB", None, None,
            "-", "connections opened by the node: " + ", ".join(notes)),
        Row(f"node RSS after the {flood:,} have gone", gone, "MB", None, None, "-",
            f"{GONE_AFTER:.0f} s after the flood's connections were opened"),
        Row(f"node RSS after the {flood:,} have gone, over idle", over, "MB", 2, "<=", "-",
            "same node, same run"),
    ]


# ------------------------------------------------------------------ measurements

def proc_rss(pid: int) -> int:
    rss = procfs.status_bytes(pid, "VmRSS")
    if rss is None:
        raise common.BenchError(f"no VmRSS for pid {pid}")
    return rss


def flood_rss(pid: int, host: str, port: int, count: int) -> dict:
    """Idle RSS, its peak during a flood of silent connections, and after."""
    idle = proc_rss(pid)
    proc = spawn("flood", host, port, count, GONE_AFTER)
    try:
        started = time.monotonic()
        peak = idle
        while proc.poll() is None and time.monotonic() - started < GONE_AFTER:
            peak = max(peak, proc_rss(pid))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=GONE_AFTER + 30)
    finally:
        common.kill_pid(proc)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise common.BenchError(f"the flood client said nothing: {err[-800:]}")
    time.sleep(max(0.0, started + GONE_AFTER - time.monotonic()))
    return {"idle": idle, "peak": peak, "gone": proc_rss(pid), "opened": lines[0]["opened"]}


def hold_space(tn: Testnet, node: dict, hostile_home: str, honest_home: str) -> dict:
    """Free space while a hostile client holds what it can; an honest STORE."""
    proc = spawn("hold", node["host"], node["port"], hostile_home, HOLD_CONNECTIONS,
                 HOLD_REQUESTS, HOLD_SIZE, 120)
    try:
        line = proc.stdout.readline()
        if not line:
            raise common.BenchError(f"the hostile client said nothing: {proc.stderr.read()[-800:]}")
        held = json.loads(line)
        store = tn.stats()[0]["store"]
        honest = run_mode("honest", node["host"], node["port"], honest_home, HONEST_SIZE)
    finally:
        common.kill_pid(proc)
    return {"free_pct": 100.0 * store["free"] / store["capacity"], "held": held,
            "honest": honest["result"]}


def spawn(mode: str, *args) -> subprocess.Popen:
    return subprocess.Popen([common.PY, SCRIPT, mode, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            cwd=common.ROOT, start_new_session=True)


def run_mode(mode: str, *args) -> dict:
    r = common.run([common.PY, SCRIPT, mode, *map(str, args)], timeout=120)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.rc != 0 or not lines:
        raise common.BenchError(f"{mode} failed ({r.rc}): {r.stdout[-800:]} {r.stderr[-800:]}")
    return json.loads(lines[-1])


# ------------------------------------------------------------ the clients (subprocesses)

def out(value) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def flood_main(host: str, port: str, count: str, hold: str) -> int:
    """Open COUNT TLS connections that complete the handshake and send
    nothing; print how many the node took; keep them HOLD seconds."""
    import asyncio
    import ssl

    async def main():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
        slots = asyncio.Semaphore(FLOOD_CONCURRENCY)

        async def one():
            async with slots:
                try:
                    connecting = asyncio.open_connection(host, int(port), ssl=context)
                    return (await asyncio.wait_for(connecting, HANDSHAKE_TIMEOUT))[1]
                except (OSError, asyncio.TimeoutError, ssl.SSLError):
                    return None  # closed at the door

        started = time.monotonic()
        writers = [w for w in await asyncio.gather(*(one() for _ in range(int(count)))) if w]
        out({"opened": len(writers), "refused": int(count) - len(writers),
             "seconds": round(time.monotonic() - started, 2)})
        await asyncio.sleep(max(0.0, float(hold) - (time.monotonic() - started)))
        for writer in writers:
            writer.transport.abort()

    asyncio.run(main())
    return 0


def hold_main(host, port, home, connections, requests, size, seconds) -> int:
    """One identity, CONNECTIONS connections, REQUESTS silent streamed STOREs
    of SIZE on each. Prints what the node granted once every request was
    answered or left open for a moment, then holds them SECONDS (or until
    killed) and prints how they ended."""
    from twisted.internet import defer, task
    from twisted.python.failure import Failure

    from flud.cli.runner import run_reactor
    from flud.protocol import messages
    from flud.protocol.client import ClientOnlyHandler
    from flud.protocol.codec import Op
    from flud.protocol.connection import dial
    from flud.protocol.errors import RemoteError
    from flud.protocol.outbound import FedSource
    from flud.protocol.party import load_party

    connections, requests, size = int(connections), int(requests), int(size)

    @defer.inlineCallbacks
    def main(reactor):
        local = load_party(home, messages.ROLE_CLIENT)
        conns = []
        for _ in range(connections):
            conn = yield dial(reactor, local, ClientOnlyHandler(), host, int(port))
            conns.append(conn)
        ended = {}

        def answered(result, index):
            if not isinstance(result, Failure):
                ended[index] = "ok"
            elif isinstance(result.value, RemoteError):
                ended[index] = getattr(result.value.code, "name", str(result.value.code))
            else:
                ended[index] = type(result.value).__name__

        count = 0
        for conn in conns:
            for _ in range(requests):
                request = messages.StoreRequest(bytes(messages.KEY_SIZE),
                                                messages.KIND_STREAMED_SHARE, size)
                d = conn.request(Op.STORE, request, source=FedSource(size + messages.KEY_SIZE))
                d.addBoth(answered, count)
                count += 1
        # Refusals come back at once; what is granted stays open (silent).
        deadline = reactor.seconds() + ANSWER_TIMEOUT
        last = -1
        while reactor.seconds() < deadline:
            yield task.deferLater(reactor, 0.5, lambda: None)
            if len(ended) == last:
                break
            last = len(ended)
        refused = {}
        for code in ended.values():
            refused[code] = refused.get(code, 0) + 1
        held = count - len(ended)
        out({"declared": count * size, "held": held, "held_bytes": held * size,
             "refused": refused})
        yield task.deferLater(reactor, float(seconds), lambda: None)
        late = {}
        for index, code in ended.items():
            late[code] = late.get(code, 0) + 1
        out({"ended": late, "open": count - len(ended)})
        for conn in conns:
            conn.close()

    run_reactor(main)
    return 0


def honest_main(host, port, home, size) -> int:
    """STORE SIZE random bytes and read them back; prints the outcome."""
    import blake3
    from twisted.internet import defer

    from flud.cli.runner import run_reactor
    from flud.protocol.client import ClientNet, NodeAddress
    from flud.protocol.errors import RemoteError

    data = os.urandom(int(size))
    key = blake3.blake3(data).digest()

    @defer.inlineCallbacks
    def main(reactor):
        net = ClientNet(reactor, home)
        try:
            peer = yield net.peer(NodeAddress(None, host, int(port)))
            yield peer.store(key, data)
            back = yield peer.retrieve(key)
            return {"result": "ok" if bytes(back) == data else "corrupt"}
        except RemoteError as err:
            return {"result": err.code.name, "message": err.message}
        finally:
            net.close()

    out(run_reactor(main))
    return 0


MODES = {"flood": flood_main, "hold": hold_main, "honest": honest_main}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in MODES:
        return MODES[sys.argv[1]](*sys.argv[2:])
    return common.bench_main(NAME, add_arguments, run, __doc__)


if __name__ == "__main__":
    sys.exit(main())
