"""Does each lab router behave as the NAT kind it is labelled? Asked the
way a peer would see it: a NATed host connects from one source port to two
public hosts, and each public host reports the address and port it saw.

- cone (and double, two port-preserving layers; upnp, natpmp, igd:
  cones that also map on request): both saw the router's
  outside address and the same port, the one the host sent from
  (endpoint-independent, port-preserving mapping);
- symmetric: the two saw different ports (a mapping per destination);
- and no public host can open a connection to a NATed host's address.
"""
import json
import subprocess
import sys

from flud.netlab.build import enter_namespace

PROBE_PORT = 7499
SOURCE_PORT = 47000
TIMEOUT = 10.0
ATTEMPTS = 3

_LISTEN = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(float(sys.argv[3]))
print("listening", flush=True)
c, peer = s.accept(); print(peer[0], peer[1], flush=True); c.close()
"""
_CONNECT = """
import socket, sys
for target in sys.argv[3:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(float(sys.argv[2])); s.bind(("", int(sys.argv[1])))
    s.connect((target, %d)); s.close()
""" % PROBE_PORT
_DIAL = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print("connected")
except OSError as err:
    print("refused", err)
"""


def _in(namespace, code, *args, **kw):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: enter_namespace(namespace), **kw)


def observed_mapping(natted: dict, publics: list, source_port: int = SOURCE_PORT) -> list:
    """natted: a lab host (lab.json's "hosts" entry); publics: two public
    hosts. Returns [(address, port)] as each public host saw the NATed
    host's connection from source_port."""
    listeners = [_in(p["namespace"], _LISTEN, p["address"], PROBE_PORT, TIMEOUT) for p in publics]
    try:
        for listener in listeners:
            if listener.stdout.readline().strip() != "listening":
                raise RuntimeError(f"probe listener did not start: {listener.stderr.read()}")
        client = _in(natted["namespace"], _CONNECT, source_port, TIMEOUT,
                     *(p["address"] for p in publics))
        _, err = client.communicate(timeout=TIMEOUT * 2)
        if client.returncode != 0:
            raise RuntimeError(f"probe connection from {natted['name']} failed: {err[-300:]}")
        seen = []
        for listener in listeners:
            out, _ = listener.communicate(timeout=TIMEOUT)
            host, port = out.split()
            seen.append((host, int(port)))
        return seen
    finally:
        for listener in listeners:
            if listener.poll() is None:
                listener.kill()
                listener.wait()


def reachable_from(public: dict, natted: dict, port: int) -> bool:
    """Can the public host open a connection to the NATed host's own address?"""
    dial = _in(public["namespace"], _DIAL, natted["address"], port, 2.0)
    out, _ = dial.communicate(timeout=TIMEOUT)
    return out.startswith("connected")


def judge(kind: str, seen: list, source_port: int = SOURCE_PORT) -> str:
    """'ok' or what is wrong, for a host of NAT kind that was seen as `seen`."""
    addresses = {host for host, _ in seen}
    ports = [port for _, port in seen]
    if len(addresses) != 1:
        return f"seen from {sorted(addresses)}: one outside address expected"
    if kind in ("cone", "double", "upnp", "natpmp", "igd"):   # the mapping kinds are cones too
        if ports != [source_port] * len(ports):
            return f"ports {ports}: a port-preserving NAT keeps {source_port}"
    elif kind == "symmetric":
        if len(set(ports)) == 1:
            return f"ports {ports}: a symmetric NAT maps each destination apart"
    return "ok"


def report(state: dict) -> dict:
    """{host name: 'ok' or what is wrong} for every NATed host of a lab."""
    hosts = state["hosts"]
    publics = [h for h in hosts if h["kind"] == "public"][:2]
    if len(publics) < 2:
        raise ValueError("the NAT check needs two public hosts")
    verdicts = {}
    for host in (h for h in hosts if h["kind"] != "public"):
        seen = None
        for attempt in range(ATTEMPTS):   # a loaded machine may drop a probe
            try:
                seen = observed_mapping(host, publics, SOURCE_PORT + attempt)
                break
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as err:
                failure = str(err).strip().splitlines()[-1][:200]
        if seen is None:
            verdicts[host["name"]] = f"probe failed: {failure}"
            continue
        verdict = judge(host["kind"], seen, SOURCE_PORT + attempt)
        if verdict == "ok" and reachable_from(publics[0], host, PROBE_PORT):
            verdict = "reachable from outside unasked"
        verdicts[host["name"]] = verdict
    return verdicts


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(report(json.load(f)), indent=1))
