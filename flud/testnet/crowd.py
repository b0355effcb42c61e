"""Starting many forked nodes at once, fast: the launcher (a zygote, the
node's code loaded once by flud.node.process.preload) forks each node, and
each says on one shared pipe when it listens and when it has joined the DHT
(flud/node/ready_signal.py). Nothing is polled: the launcher sleeps in
select() until a node speaks.

Where a 200-node testnet's start went before (measured here): every node
joined through node 0, which then answered, and dialled back, 199 joiners
on its one share of two cores while they all waited on it; and the launcher
polled 200 node.json files every 50 ms, then asked every node for its STATS
over TLS every 0.2 s until each table was full. Now each node joins through
BOOTSTRAPS nodes already listening (those that joined, once there are
enough: their tables answer a join at once), picked at random, and the
launcher forks ahead of the nodes listening by at most AHEAD + GROWTH per
listener, so that early joiners spread over a growing set of bootstraps
instead of all landing on node 0.

Each node stays a separate OS process with its own reactor.
"""
import json
import os
import random
import select
import time

from flud.testnet.launch import LaunchError, log_tail, node_home, spawn_node

JOINED_CONTACTS = 20      # joined: the DHT join done and this many contacts (or all others)
BOOTSTRAPS = 2            # nodes each newcomer joins through
AHEAD, GROWTH = 8, 4      # forked but not listening yet: at most AHEAD + GROWTH * listening
CHECK_EXITS = 0.2         # seconds between looks at which children died
READ_SIZE = 65536


class Crowd:
    """The launcher's side of the pipe: who listens (their node.json
    contents) and who joined."""

    def __init__(self, net, deadline: float):
        self.net = net
        self.deadline = deadline
        self.read_fd, self.write_fd = os.pipe()
        self.listening = {}     # index -> node.json contents
        self.joined = set()
        self._partial = b""
        self._exits_checked = 0.0

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def hear(self, timeout: float) -> None:
        """Read what the nodes said within timeout (0: only what is there)."""
        readable, _, _ = select.select([self.read_fd], [], [], max(0.0, timeout))
        if readable:
            data = os.read(self.read_fd, READ_SIZE)
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                self._take(line)
        now = time.monotonic()
        if now - self._exits_checked >= CHECK_EXITS:
            self._exits_checked = now
            self._check_exits()

    def _take(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            index = int(message["index"])
        except (ValueError, KeyError, TypeError):
            return          # not a node's line: nothing else writes here
        if message.get("event") == "listening":
            self.listening[index] = message["info"]
        elif message.get("event") == "joined":
            self.joined.add(index)

    def _check_exits(self) -> None:
        for index, proc in self.net.processes.items():
            if index not in self.joined and proc.poll() is not None:
                home = node_home(self.net.directory, index)
                raise LaunchError(f"node {index} exited with code {proc.returncode} "
                                  f"before it was ready:\n{log_tail(home)}")

    def wait(self, done, what: str) -> None:
        while not done():
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise LaunchError(what)
            self.hear(min(left, CHECK_EXITS))


def start(net, count: int, capacity: int, memory_log: bool = False, base_port: int = 0,
          deadline: float = None, options: dict | None = None) -> list:
    """Testnet.start for forked nodes: preload the node's code once, fork
    every node, return once each joined (testnet.json written); sets
    net.listening_seconds. On failure the caller's net.abort() stops what
    was started."""
    from flud.node.process import preload
    from flud.testnet.launch import write
    os.makedirs(net.directory, exist_ok=True)
    preload()

    def config(index, join, also_join):
        return net.node_config(index, join, also_join, capacity, memory_log, base_port, options)
    nodes = start_crowd(net, count, config, deadline)
    write(net.directory, nodes)
    return nodes


def start_crowd(net, count: int, config, deadline: float, rng=None) -> list:
    """Fork `count` nodes of net (a flud.testnet.launch.Testnet); config(index,
    join, also_join) -> NodeConfig. Returns their node.json contents once
    every one joined; LaunchError past deadline or when one exits."""
    rng = rng or random.Random()
    want = min(count - 1, JOINED_CONTACTS)
    crowd = Crowd(net, deadline)
    started = time.monotonic()
    try:
        def fork(index, join=None, also_join=()):
            net.processes[index] = spawn_node(
                config(index, join, also_join), True,
                ready=(crowd.write_fd, index, want), close=(crowd.read_fd,))

        fork(0)
        crowd.wait(lambda: 0 in crowd.listening, "node 0 did not listen in time")
        for index in range(1, count):
            crowd.wait(lambda: index - len(crowd.listening) < AHEAD + GROWTH * len(crowd.listening),
                       f"{index - len(crowd.listening)} node(s) did not listen in time")
            crowd.hear(0)
            pool = sorted(crowd.joined if len(crowd.joined) >= BOOTSTRAPS else crowd.listening)
            picked = rng.sample(pool, min(BOOTSTRAPS, len(pool)))
            addresses = [(crowd.listening[i]["host"], crowd.listening[i]["port"]) for i in picked]
            fork(index, addresses[0], addresses[1:])
        crowd.wait(lambda: len(crowd.listening) == count,
                   f"{count - len(crowd.listening)} node(s) did not listen in time")
        net.listening_seconds = time.monotonic() - started
        crowd.wait(lambda: len(crowd.joined) == count,
                   f"{count - len(crowd.joined)} node(s) have not joined the DHT yet "
                   f"(routing table of {want}); see their node.log files")
        return [crowd.listening[i] for i in range(count)]
    finally:
        crowd.close()
