"""A small wire client the integration tests run as a subprocess.

Twisted's reactor cannot be restarted, so every exchange with a node runs in
its own short-lived process. Each command prints JSON on stdout.

    peer_tool.py stats DIR                        stats of every node of a testnet
    peer_tool.py stats-one HOST:PORT HOME         one node's stats
    peer_tool.py store HOST:PORT HOME SIZE SEED   STORE SIZE random bytes
    peer_tool.py peers HOST:PORT HOME             the node's peer list
    peer_tool.py roundtrip HOST:PORT HOME         STORE/RETRIEVE/VERIFY/DELETE of a share
    peer_tool.py abort-store HOST:PORT HOME SIZE CUT
                                                  start a STORE of SIZE bytes, die after CUT
    peer_tool.py retrieve HOST:PORT HOME KEYFILE  fetch each key (one hex per line)
    peer_tool.py archive-writer HOST:PORT HOME SEED MEMBERS MEMBER_SIZE MAX_TARS
                                                  STORE archive tars in a loop, one JSON
                                                  line per acknowledged tar
    peer_tool.py dial HOST:PORT HOME              dial once, ask nothing: how it ended
    peer_tool.py put-archive HOST:PORT HOME SEED MEMBERS SIZE
                                                  STORE one tar of MEMBERS members of SIZE
                                                  bytes each; prints their keys in order
    peer_tool.py delete HOST:PORT HOME KEYFILE    DELETE each key in turn: {key: ok | code}
    peer_tool.py link HOST:PORT HOME FILE         send FILE's bytes as a LINK: ok | code
    peer_tool.py check HOST:PORT HOME KEYFILE     RETRIEVE and VERIFY each key:
                                                  {key: ok | corrupt | code}
"""
import io
import json
import os
import random
import sys
import tarfile

import blake3
from twisted.internet import defer

from flud.cli.runner import run_reactor
from flud.protocol.client import ClientNet, NodeAddress
from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import RemoteError
from flud.testnet.launch import load
from flud.testnet.query import collect_stats

TIMEOUT = 30.0


def out(value) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def address(text: str):
    host, _, port = text.rpartition(":")
    return NodeAddress(None, host or "127.0.0.1", int(port))


def key_of(data) -> bytes:
    return blake3.blake3(data).digest()


def error_name(err) -> str:
    if isinstance(err, RemoteError):
        return getattr(err.code, "name", str(err.code))
    return type(err).__name__


def with_peer(addr, home, job):
    """Run job(peer, reactor) -> Deferred with a connection to one node."""

    @defer.inlineCallbacks
    def main(reactor):
        net = ClientNet(reactor, home)
        try:
            peer = yield net.peer(address(addr)).addTimeout(TIMEOUT, reactor)
            result = yield job(peer, reactor)
            return result
        finally:
            net.close()

    return run_reactor(main)


def cmd_stats(directory):
    nodes = load(directory)["nodes"]
    out([{"node_id": n["node_id"], "pid": n["pid"], "stats": s}
         for n, s in run_reactor(lambda reactor: collect_stats(reactor, directory, nodes))])


def cmd_stats_one(addr, home):
    out(with_peer(addr, home, lambda peer, reactor: peer.stats()))


def cmd_store(addr, home, size, seed):
    """STORE SIZE random bytes as one share; prints the outcome."""
    data = random.Random(int(seed)).randbytes(int(size))
    key = key_of(data)

    @defer.inlineCallbacks
    def job(peer, reactor):
        try:
            yield peer.store(key, data)
        except RemoteError as err:
            return {"key": key.hex(), "result": error_name(err), "message": err.message}
        return {"key": key.hex(), "result": "ok"}

    out(with_peer(addr, home, job))


def cmd_peers(addr, home):
    @defer.inlineCallbacks
    def job(peer, reactor):
        infos = yield peer.peers()
        return {"node_id": peer.node_id.hex(),
                "peers": [{"node_id": i.node_id.hex(), "port": i.record.first_tcp()[1],
                           "alive": i.alive, "sequence": i.record.sequence}
                          for i in infos]}

    out(with_peer(addr, home, job))


def cmd_roundtrip(addr, home):
    """Every answer a client relies on, in one connection."""

    @defer.inlineCallbacks
    def job(peer, reactor):
        result = {}
        data = random.Random(os.getpid()).randbytes(300 * 1024)  # > inline: DATA frames too
        key = key_of(data)
        yield peer.store(key, data)
        back = yield peer.retrieve(key)
        result["retrieve_ok"] = back == data
        part = yield peer.retrieve(key, 1000, 5000)
        result["range_ok"] = part == data[1000:6000]
        nonce = b"n" * 16
        digest = yield peer.verify(key, nonce, 10, 100)
        result["verify_ok"] = digest == blake3.blake3(nonce + data[10:110]).digest()
        try:
            yield peer.store(key_of(b"this is the key"), b"but not these bytes")
            result["mismatch"] = "accepted"
        except Exception as err:
            result["mismatch"] = error_name(err)
        try:
            yield peer.retrieve(key_of(b"this is the key"))
            result["mismatch_visible"] = True
        except Exception as err:
            result["mismatch_visible"] = error_name(err) != "NOT_FOUND"
        yield peer.delete(key)
        try:
            yield peer.retrieve(key)
            result["after_delete"] = "still there"
        except Exception as err:
            result["after_delete"] = error_name(err)
        stats = yield peer.stats()
        result["server"] = stats.get("server")
        return result

    out(with_peer(addr, home, job))


class _DyingSource:
    """A STORE source that kills this process once CUT bytes were taken."""

    def __init__(self, data, cut):
        self._view = memoryview(data)
        self._pos = 0
        self._cut = cut

    @property
    def remaining(self):
        return len(self._view) - self._pos

    def read(self, n):
        if self._pos >= self._cut:
            os._exit(0)  # the peer vanishes in the middle of its upload
        piece = self._view[self._pos:self._pos + n]
        self._pos += len(piece)
        return piece

    def close(self):
        pass


def cmd_abort_store(addr, home, size, cut):
    size, cut = int(size), int(cut)
    data = random.Random(size).randbytes(size)
    key = key_of(data)
    out({"key": key.hex(), "size": size})

    def job(peer, reactor):
        head = bytes(data[:1024 * 1024])
        source = _DyingSource(data, cut)
        source.read(len(head))
        return peer.conn.request(Op.STORE, messages.StoreRequest(key, messages.KIND_SHARE, size, head),
                                 source=source)

    try:
        with_peer(addr, home, job)
    except Exception as err:
        out({"error": str(err)})
        return 1
    out({"error": "the STORE finished before the cut"})
    return 1


def cmd_retrieve(addr, home, keyfile):
    with open(keyfile) as f:
        keys = [line.strip() for line in f if line.strip()]

    @defer.inlineCallbacks
    def job(peer, reactor):
        results = {}
        for key_hex in keys:
            try:
                data = yield peer.retrieve(bytes.fromhex(key_hex))
            except Exception as err:
                results[key_hex] = error_name(err)
                continue
            results[key_hex] = "ok" if key_of(data).hex() == key_hex else "corrupt"
        return results

    out(with_peer(addr, home, job))


def make_tar(rng, members, member_size):
    buf = io.BytesIO()
    keys = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for _ in range(members):
            data = rng.randbytes(rng.randint(member_size // 2, member_size))
            key = key_of(data).hex()
            info = tarfile.TarInfo(key)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            keys.append(key)
    return buf.getvalue(), keys


def cmd_archive_writer(addr, home, seed, members, member_size, max_tars):
    rng = random.Random(int(seed))
    members, member_size, max_tars = int(members), int(member_size), int(max_tars)

    @defer.inlineCallbacks
    def job(peer, reactor):
        for number in range(max_tars):
            tar, keys = make_tar(rng, members, member_size)
            yield peer.store(key_of(tar), tar, kind=messages.KIND_ARCHIVE)
            out({"tar": number, "members": keys})

    try:
        with_peer(addr, home, job)
    except Exception as err:
        out({"error": f"{type(err).__name__}: {err}"})


def cmd_dial(addr, home):
    """Dial once; prints the error's class, code and message (or ok)."""

    @defer.inlineCallbacks
    def main(reactor):
        net = ClientNet(reactor, home)
        try:
            yield net.peer(address(addr)).addTimeout(TIMEOUT, reactor)
            return {"result": "ok"}
        except Exception as err:
            return {"result": type(err).__name__, "code": str(getattr(err, "code", "")),
                    "message": str(err)}
        finally:
            net.close()

    out(run_reactor(main))


def read_keys(keyfile):
    with open(keyfile) as f:
        return [line.strip() for line in f if line.strip()]


def cmd_put_archive(addr, home, seed, members, size):
    rng = random.Random(int(seed))
    datas = [rng.randbytes(int(size)) for _ in range(int(members))]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for data in datas:
            info = tarfile.TarInfo(key_of(data).hex())
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    body = buf.getvalue()

    @defer.inlineCallbacks
    def job(peer, reactor):
        yield peer.store(key_of(body), body, kind=messages.KIND_ARCHIVE)
        return {"members": [key_of(d).hex() for d in datas]}

    out(with_peer(addr, home, job))


def cmd_delete(addr, home, keyfile):
    keys = read_keys(keyfile)

    @defer.inlineCallbacks
    def job(peer, reactor):
        results = {}
        for key_hex in keys:
            try:
                yield peer.delete(bytes.fromhex(key_hex))
                results[key_hex] = "ok"
            except RemoteError as err:
                results[key_hex] = error_name(err)
        return results

    out(with_peer(addr, home, job))


def cmd_check(addr, home, keyfile):
    keys = read_keys(keyfile)
    nonce = b"check-nonce-0016"

    @defer.inlineCallbacks
    def job(peer, reactor):
        results = {}
        for key_hex in keys:
            try:
                data = yield peer.retrieve(bytes.fromhex(key_hex))
                digest = yield peer.verify(bytes.fromhex(key_hex), nonce)
            except RemoteError as err:
                results[key_hex] = error_name(err)
                continue
            good = key_of(data).hex() == key_hex and digest == key_of(nonce + bytes(data))
            results[key_hex] = "ok" if good else "corrupt"
        return results

    out(with_peer(addr, home, job))


def cmd_link(addr, home, path):
    with open(path, "rb") as f:
        raw = f.read()

    @defer.inlineCallbacks
    def job(peer, reactor):
        try:
            yield peer.conn.request(Op.LINK, messages.LinkBody(raw))
            return {"result": "ok"}
        except RemoteError as err:
            return {"result": error_name(err), "message": err.message}

    out(with_peer(addr, home, job))


def cmd_dial_back(addr, home, host, port, times="1"):
    """DIAL_BACK(port, host) TIMES times on one connection: a list of
    {status, observed} or the error code of each."""

    @defer.inlineCallbacks
    def job(peer, reactor):
        results = []
        for _ in range(int(times)):
            try:
                answer = yield peer.conn.request(Op.DIAL_BACK,
                                                 messages.DialBackRequest(int(port), host))
                results.append({"reached": answer.reached, "observed": answer.observed_host})
            except RemoteError as err:
                results.append(error_name(err))
        return results

    out(with_peer(addr, home, job))


def cmd_reserve(addr, home):
    @defer.inlineCallbacks
    def job(peer, reactor):
        try:
            answer = yield peer.conn.request(Op.RESERVE, messages.Empty())
        except RemoteError as err:
            return error_name(err)
        return {"seconds": answer.seconds}

    out(with_peer(addr, home, job))


COMMANDS = {
    "link": cmd_link,
    "dial-back": cmd_dial_back,
    "reserve": cmd_reserve,
    "put-archive": cmd_put_archive,
    "delete": cmd_delete,
    "check": cmd_check,
    "stats": cmd_stats,
    "stats-one": cmd_stats_one,
    "store": cmd_store,
    "peers": cmd_peers,
    "roundtrip": cmd_roundtrip,
    "abort-store": cmd_abort_store,
    "retrieve": cmd_retrieve,
    "archive-writer": cmd_archive_writer,
    "dial": cmd_dial,
}


if __name__ == "__main__":
    sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]) or 0)
