"""The simulated world: storage nodes in memory (the real share store,
storage.memory.MemoryShareStore), client homes on disk, one simulated time,
and a way to run one real client job on it that may be killed at any await.

Every job gets a reactor of its own (a task.Clock started at the world's
time): a job killed after some steps is simply never advanced again, so
nothing of it runs later, and its home's sqlite index keeps exactly what it
committed, as after a SIGKILL. The next job opens the home afresh.

Nothing here reads the machine's clock or randomness: a seed makes the same
world. Where the client code takes the wall clock from FLUD_NOW (its
developer switch, flud/client/context.py) the job runs with FLUD_NOW set to
the client's simulated wall time.
"""
import bisect
import contextlib
import gc
import hashlib
import io
import itertools
import logging
import os
import sys

from twisted.internet import task
from twisted.internet.base import DelayedCall
from twisted.python.failure import Failure

from flud.client.context import JobContext
from flud.client.home import ClientHome, create_home
from flud.client.progress import Progress
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.protocol.errors import ErrorCode, RemoteError
from flud.workers import CPUPool
from tests.unit.client.fakes import FakeNetwork, FakeNode, FakeReactor

DAY = 86400.0
# A node down longer than this is no longer listed by a new job's discovery;
# one that went down more recently still is (its record has not expired):
# the "freshly dead" node a real client still tries.
DISCOVERY_LAG = 600.0
JOB_LIMIT = 2 * DAY          # simulated time a job may take before it counts as hung
EVENT_LIMIT = 2_000_000


class SimNode(FakeNode):
    """A FakeNode that keeps every root record it was given (to replay an
    old one when told to) and can be destroyed (its disk gone for good)."""

    def __init__(self, node_id: bytes):
        super().__init__(node_id)
        self.root_history = {}      # owner -> [record, ...] oldest first
        self.replay = None          # index into root_history to answer with, or None
        self.destroyed = False
        self.down_since = None      # world time it went down (None: up)
        self.deletes = 0            # DELETEs it carried out
        self.puts = 0               # ROOT_PUTs it took
        self.last_put = 0

    def delete(self, owner, key):
        super().delete(owner, key)
        self.deletes += 1

    _put_order = itertools.count(1)

    def root_put(self, owner, record):
        super().root_put(owner, record)
        self.puts += 1
        self.last_put = next(SimNode._put_order)   # which node got the newest root
        self.root_history.setdefault(owner, []).append(record)

    def root_get(self, owner):
        history = self.root_history.get(owner)
        if self.replay is not None and history:
            return history[min(self.replay, len(history) - 1)]
        return super().root_get(owner)

    def true_root(self, owner):
        return super().root_get(owner)


class SimNetwork(FakeNetwork):
    """An INetwork over the world's nodes for one job. listed: the node ids
    this job's discovery found; oracle: the harness's own view (every node
    that still exists answers, honestly; never a client's)."""

    def __init__(self, clock, nodes: dict, client_id: bytes, listed, oracle=False):
        super().__init__(clock, nodes=0, client_id=client_id)
        # The member list: every node that exists, up or away (what the
        # root's home set is ranked from); a node whose disk is gone has left
        # it. Calls reach any node the world has (a destroyed one fails).
        self.nodes = {i: node for i, node in nodes.items() if not node.destroyed}
        self.world_nodes = nodes
        self.listed = list(listed)
        self.oracle = oracle

    def alive_ids(self):
        return [n for n in self.listed if n not in self.failed]

    def call(self, node_id, method, *args, **kwargs):
        if node_id not in self.nodes and node_id in self.world_nodes:
            return task.deferLater(self.clock, self.delay, _gone, node_id)
        if not self.oracle:
            return super().call(node_id, method, *args, **kwargs)
        node = self.nodes[node_id]
        name = {"store": "store_", "root_get": "true_root"}.get(method, method)

        def answer():
            if node.destroyed:
                raise ConnectionError("node destroyed")
            try:
                return getattr(node, name)(self.client_id, *args, **kwargs)
            except Exception as err:
                if getattr(err, "code", None) == "not_found":
                    raise RemoteError(ErrorCode.NOT_FOUND, str(err)) from None
                raise
        return task.deferLater(self.clock, self.delay, answer)

    def open_store(self, node_id, size):
        assert not self.oracle, "the oracle never writes"
        if node_id not in self.nodes:
            return task.deferLater(self.clock, self.delay, _gone, node_id)
        return super().open_store(node_id, size)


def _gone(node_id):
    raise ConnectionError(f"node {node_id.hex()[:8]} is gone (destroyed)")


def _due(call) -> float:
    return call.getTime()


class SimClock(FakeReactor):
    """A task.Clock whose pending calls stay sorted as they come (Clock
    sorts the whole list at every callLater and after every call it runs:
    a fifth of a history's time, profiled). The same order: by due time,
    ties first come first; a call pushed later (DelayedCall.delay/reset) is
    put in its place when it reaches the head, as the real reactor does."""

    def callLater(self, delay, callable, *args, **kw):
        call = DelayedCall(self.seconds() + delay, callable, args, kw, self.calls.remove,
                           self._moved_earlier, self.seconds)
        bisect.insort_right(self.calls, call, key=_due)
        return call

    def _moved_earlier(self, call) -> None:
        self.calls.remove(call)
        bisect.insort_right(self.calls, call, key=_due)

    def _settle_head(self) -> None:
        calls = self.calls
        while calls and calls[0].delayed_time:
            call = calls.pop(0)
            call.activate_delay()
            bisect.insort_right(calls, call, key=_due)

    def next_due(self):
        """When the next pending call is due (None: nothing is pending)."""
        self._settle_head()
        return self.calls[0].getTime() if self.calls else None

    def advance(self, amount: float) -> None:
        self.rightNow += amount
        calls = self.calls
        while True:
            self._settle_head()
            if not calls or calls[0].getTime() > self.rightNow:
                return
            call = calls.pop(0)
            call.called = 1
            call.func(*call.args, **call.kw)


class Killed(Exception):
    """The job was abandoned at a step (the client process killed)."""


class Unhandled(Exception):
    """An error inside the job that no Deferred handled (Twisted logged it
    when the Deferred was collected): a failure the job never reported."""


class Hung(Exception):
    """The job neither finished nor had anything scheduled: it waits forever."""


class World:
    """nodes: {id: SimNode}; now: the world's time (seconds); skew: the
    client's wall clock minus the world's (clock jumps move it)."""

    START = 1_750_000_000.0   # a fixed epoch: the same times on every run

    def __init__(self, base: str, rng, nodes: int, k: int, n: int,
                 segment_size: int, small_file_limit: int):
        self.base = base
        self.rng = rng
        self.now = self.START
        self.skew = 0.0
        self.nodes = {}
        self._next_node = 1
        for _ in range(nodes):
            self.add_node()
        self.client_id = rng.randbytes(32)
        self.secret = rng.randbytes(32)
        # chunks of ~segment/2 (a large file is 3-7 x small_file_limit): a
        # grown or rewritten file names ranges of its earlier extents, which
        # prune must keep while any kept snapshot's runs name them
        self.config = {"k": k, "n": n, "segment_size": segment_size,
                       "small_file_limit": small_file_limit,
                       "chunk_size": 1 << max(8, (segment_size // 2).bit_length() - 1)}
        self._homes = 0

    # ---- nodes ----------------------------------------------------------------

    def add_node(self) -> bytes:
        node_id = self._next_node.to_bytes(2, "big") * 16
        self._next_node += 1
        self.nodes[node_id] = SimNode(node_id)
        return node_id

    def existing(self):
        return [i for i, node in self.nodes.items() if not node.destroyed]

    def up_ids(self):
        return [i for i, node in self.nodes.items() if node.up and not node.destroyed]

    def set_down(self, node_id) -> None:
        node = self.nodes[node_id]
        node.up = False
        node.down_since = self.now

    def set_up(self, node_id) -> None:
        node = self.nodes[node_id]
        node.up = True
        node.down_since = None

    def destroy(self, node_id) -> None:
        node = self.nodes[node_id]
        node.destroyed, node.up = True, False
        node.store = None   # its disk is gone

    def listed(self):
        """What a new job's discovery finds: nodes up, and nodes that went
        down less than DISCOVERY_LAG ago."""
        return [i for i, node in self.nodes.items() if not node.destroyed and
                (node.up or self.now - node.down_since < DISCOVERY_LAG)]

    # ---- homes ----------------------------------------------------------------

    def new_home(self, name: str) -> str:
        """A home from the key alone (the same secret and owner id)."""
        path = os.path.join(self.base, f"home-{name}")
        home = create_home(path, join=("127.0.0.1", 1), secret=self.secret,
                           overrides=self.config)
        home.close()
        _seeded_home_id(path, self.secret + name.encode())
        return path

    # ---- running a job --------------------------------------------------------

    def wall(self) -> float:
        return self.now + self.skew

    def network(self, clock, oracle=False) -> SimNetwork:
        listed = self.existing() if oracle else self.listed()
        return SimNetwork(clock, self.nodes, self.client_id, listed, oracle)

    def context(self, clock, home, network) -> JobContext:
        cfg = home.config
        return JobContext(clock, home, network, CPUPool(clock, inline=True),
                          MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                          Progress("sim", quiet=True), SegmentCoder(cfg["k"], cfg["n"]),
                          clock.seconds)

    def run_job(self, home_path, make, kill_at=None, oracle=False):
        """Run make(clock, home, network, ctx) -> Deferred on a fresh reactor
        and home: (result, events). Raises Killed after kill_at events,
        Hung, or the job's own exception."""
        _install_observer()
        clock = SimClock()
        clock.advance(self.now)
        home = ClientHome(home_path)
        network = self.network(clock, oracle)
        network.client_id = self.client_id
        ctx = self.context(clock, home, network)
        out = io.StringIO()
        result = []
        try:
            with _wall_time(self.wall()), contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(out), _quiet_garbage():
                d = make(clock, home, network, ctx)
                del make
                try:
                    events = self._drive(clock, d, kill_at)
                    if events is not None:
                        d.addBoth(result.append)
                finally:
                    # What the job left behind goes now (a killed job's
                    # generators close; an error nobody handled is logged),
                    # not in some later step: its Deferred holds them.
                    del d
                    gc.collect(2 if kill_at is not None else 1)
            lost = UNHANDLED[:]
            del UNHANDLED[:]
            if events is None:
                raise Killed(f"killed after {kill_at} steps")
            if lost:
                raise Unhandled("; ".join(lost[:3]))
        finally:
            self.now = max(self.now, clock.seconds())
            home.close()
        if isinstance(result[0], Failure):
            result[0].raiseException()
        return result[0], events

    def _drive(self, clock, d, kill_at):
        """Step the job's reactor one due moment at a time (each an await
        point of some part of the job) until it finishes (the number of
        steps) or is killed (None: it is dropped, as by SIGKILL)."""
        events, started = 0, clock.seconds()
        while not d.called:
            if kill_at is not None and events >= kill_at:
                d.addErrback(lambda _: None)   # never fires: the process is gone
                del clock.calls[:]             # nor does anything it was waiting for
                return None
            due = clock.next_due()     # SimClock keeps them sorted by time
            if due is None:
                raise Hung("the job waits for something that never comes")
            clock.advance(max(0.0, due - clock.seconds()))
            events += 1
            if clock.seconds() - started > JOB_LIMIT or events > EVENT_LIMIT:
                raise Hung(f"the job ran {clock.seconds() - started:.0f} s, {events} steps")
        return events


@contextlib.contextmanager
def cached_identities():
    """Identity.from_pem kept by the PEM's bytes while a history runs: every
    job opens its home afresh, and parsing the home's key (OpenSSL's
    decoder) was a twentieth of a history's time, profiled. The same bytes
    give the same key; a file that does not parse still raises each time."""
    from flud.keys import Identity
    original = Identity.__dict__["from_pem"]
    parsed = {}

    def from_pem(cls, pem, source="key"):
        identity = parsed.get(pem)
        if identity is None:
            identity = parsed[pem] = original.__func__(cls, pem, source)
        return identity
    Identity.from_pem = classmethod(from_pem)
    try:
        yield
    finally:
        Identity.from_pem = original


def _seeded_home_id(path: str, seed: bytes) -> None:
    """Where homes carry an id of their own (made at random), the seed
    makes it instead, so a replay prints the same ids."""
    try:
        from flud.client.home import HOME_ID_FILE
    except ImportError:
        return
    with open(os.path.join(path, HOME_ID_FILE), "w") as f:   # before any job reads it
        f.write(hashlib.blake2b(seed, digest_size=16).hexdigest() + "\n")


UNHANDLED = []   # errors no Deferred handled, seen while the harness ran a job


def _observe(event):
    failure = event.get("log_failure")
    if failure is not None and event.get("log_namespace", "").startswith("twisted.internet.defer"):
        UNHANDLED.append(f"{failure.type.__name__}: {failure.getErrorMessage()}")


def _install_observer():
    from twisted.logger import globalLogPublisher
    if not getattr(_install_observer, "done", False):
        globalLogPublisher.addObserver(_observe)
        _install_observer.done = True


@contextlib.contextmanager
def _quiet_garbage():
    """A killed job's generators, closed by the collector, and the client's
    log lines (node failures it works around) stay out of the output."""
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    logger = logging.getLogger("flud")
    old_level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        logger.setLevel(old_level)


@contextlib.contextmanager
def _wall_time(seconds: float):
    """FLUD_NOW: the client code's wall clock (context.wall_clock) for one job."""
    old = os.environ.get("FLUD_NOW")
    os.environ["FLUD_NOW"] = repr(seconds)
    try:
        yield
    finally:
        if old is None:
            del os.environ["FLUD_NOW"]
        else:
            os.environ["FLUD_NOW"] = old
