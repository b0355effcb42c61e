"""`python -m flud.netlab.lookups HOME SPEC_JSON`: record lookups as the lab
measures them, run inside one namespace (sweep() below starts it
there). Prints one JSON object: for each origin, each lookup's target,
whether the target's signed record was found, the time it took, when it
ended (unix time) and the FIND_NODE queries it sent.

SPEC: {"origins": [{"name", "node_id", "host", "port"}], "targets": [id hex]}.
A lookup "from" an origin node starts at that node alone (its routing
table answers first), then iterates as a client does (flud/overlay/lookup.py,
alpha = 3): it is done the moment an answer carries the target's record
whose signature checks (flud/protocol/find_node.py's RecordChecker), or
when nobody is left to ask. The lookups of one namespace share one client
identity and its connections (a node is dialled once: TCP, TLS, HELLO; the
lookups after reuse the connection, as a client's lookups in one run do);
each origin runs PER_ORIGIN lookups at once, the origins all at once.
"""
import json
import os
import sys
import time

from flud.overlay.lookup import Lookup
from flud.overlay.routing import Contact, subnet_of
from flud.protocol.find_node import QUERY_TIMEOUT, RecordChecker, drive

LOOKUP_TIMEOUT = 30.0
PER_ORIGIN = 4


class RecordLookup(Lookup):
    """A lookup that is done once the target's checked record came back."""

    record = None

    @property
    def done(self) -> bool:
        return self.record is not None or super().done


def _contact(record) -> Contact:
    return Contact(record.node_id, subnet_of(record.first_tcp()[0]), record)


def run_origin(reactor, net, origin: dict, targets: list, per_origin: int = PER_ORIGIN,
               sample: int = None):
    """Fires with [{"target", "found", "seconds", "queries"}] for one origin."""
    from twisted.internet import defer

    from flud.protocol.client import NodeAddress

    checker = RecordChecker()
    origin_id = bytes.fromhex(origin["node_id"])

    def ask_for(run, target):
        def ask(contact):
            if contact.node_id == origin_id:
                address = NodeAddress(origin_id, origin["host"], origin["port"])
            else:
                address = NodeAddress(contact.node_id, *contact.record.first_tcp())
            d = net.peer(address)
            d.addCallback(lambda peer: peer.find_node(target))
            d.addTimeout(QUERY_TIMEOUT, reactor)

            def answered(records):
                checked = checker.check(records, reactor.seconds())
                for record in checked:
                    if record.node_id == target and run.record is None:
                        run.record = record
                return [_contact(r) for r in checked]
            return d.addCallback(answered)
        return ask

    rows = []
    waiting = [t for t in targets if bytes.fromhex(t) != origin_id][:sample]

    @defer.inlineCallbacks
    def worker():
        while waiting:
            target_hex = waiting.pop(0)
            target = bytes.fromhex(target_hex)
            run = RecordLookup(target, [Contact(origin_id, "", None)])
            started = time.monotonic()
            d = drive(run, ask_for(run, target))
            d.addTimeout(LOOKUP_TIMEOUT, reactor)
            try:
                yield d
            except Exception:
                pass
            rows.append({"target": target_hex, "found": run.record is not None,
                         "seconds": round(time.monotonic() - started, 4),
                         "ended": round(time.time(), 3), "queries": len(run.asked)})
    d = defer.DeferredList([worker() for _ in range(per_origin)], consumeErrors=True)
    return d.addCallback(lambda _: rows)


PROBERS = 2     # processes sweeping the public origins (two cores)


def sweep(lab, timeout: float = 120.0, per_origin: int = PER_ORIGIN, sample: int = None) -> dict:
    """From every node of a running lab (flud.netlab.lab.Lab), a lookup of
    every other public node's id: {origin name: [row]} (rows as above;
    an origin whose prober failed has none). The public origins are swept
    from the first public host's namespace, each NATed one from its own
    (its address is private to its home)."""
    import subprocess

    from flud.netlab import build

    nodes = lab.state.get("nodes", []) if lab.state else []
    public = [n for n in nodes if n["kind"] == "public"]
    targets = [n["node_id"] for n in public]
    groups = [(public[0]["namespace"], public[i::PROBERS], f"public{i}")
              for i in range(min(PROBERS, len(public)))]
    groups += [(n["namespace"], [n], n["namespace"]) for n in nodes if n["kind"] != "public"]
    procs = {}
    for namespace, origins, label in groups:
        home = os.path.join(lab.directory, ".lookups", label)
        os.makedirs(home, exist_ok=True)
        spec = {"origins": [{k: n[k] for k in ("name", "node_id", "host", "port")}
                            for n in origins], "targets": targets,
                "per_origin": per_origin, "sample": sample}
        procs[label] = subprocess.Popen(
            [sys.executable, "-m", "flud.netlab.lookups", home, json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda ns=namespace: build.enter_namespace(ns))
    found = {}
    for label, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0:
            raise build.LabError(f"the lookups of {label} failed: {err[-500:]}")
        found.update({name: (rows if isinstance(rows, list) else [])
                      for name, rows in json.loads(out).items()})
    return found


def summary(found: dict, since: float = None) -> dict:
    """Counts and latencies of a sweep: lookups, found, missing [(origin,
    target)], the seconds of the lookups that found their record (p50,
    p80, p99), and `last`: when the last of them ended, in seconds after
    `since` (a unix time)."""
    rows = [(origin, row) for origin, rows in found.items() for row in rows]
    seconds = sorted(row["seconds"] for _, row in rows if row["found"])
    ended = max((row["ended"] for _, row in rows), default=None)

    def pct(p):
        return seconds[min(len(seconds) - 1, int(p * len(seconds)))] if seconds else None
    queries = sorted(row["queries"] for _, row in rows if row["found"])
    return {"lookups": len(rows), "found": len(seconds),
            "missing": [(o, r["target"][:12]) for o, r in rows if not r["found"]],
            "p50": pct(0.5), "p80": pct(0.8), "p99": pct(0.99),
            "last": None if ended is None or since is None else round(ended - since, 2),
            "queries_median": queries[len(queries) // 2] if queries else None}


def main(argv) -> int:
    home, spec = argv[0], json.loads(argv[1])
    from twisted.internet import defer, reactor

    from flud.protocol.client import ClientNet

    net = ClientNet(reactor, home)
    outcome = []
    d = defer.DeferredList([run_origin(reactor, net, o, spec["targets"],
                                       spec.get("per_origin", PER_ORIGIN), spec.get("sample"))
                            for o in spec["origins"]], consumeErrors=True)
    d.addBoth(outcome.append)
    d.addBoth(lambda _: reactor.stop())
    if not outcome:
        reactor.run(installSignalHandlers=False)
    net.close()
    json.dump({o["name"]: (value if ok else {"error": str(value)})
               for o, (ok, value) in zip(spec["origins"], outcome[0])}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
