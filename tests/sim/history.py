"""One simulated history: a seed drives everything (the world's shape, the
tree's changes, the jobs, the faults and when a client is killed), the real
client jobs run on the simulated world, and after every step the invariants
are checked. run_history(seed) -> Outcome; the same seed, the same history.

Fault kinds (FAULT_KINDS) are switched on by name: each one is the cause of
one or more findings of issue 25 on the code it was written against, so the
default set (DEFAULT_FAULTS) holds the kinds that pass today, and
FLUD_SIM_FAULTS=all (or a comma list) shows the others fail.
"""
import argparse
import contextlib
import fcntl
import functools
import gc
import itertools
import os
import random
import shutil
import traceback

from twisted.internet import defer

from flud.cli.exits import EXIT_OK, UserError
from flud.client.repository import extents as extents_module
from flud.client.backup.backup_job import Backup
from flud.client.restore.restore_job import Restore
from flud.client.restore.tree_restore import TreeRestore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.errors import FludError
from tests.sim import oracle
from tests.sim.tree import TreeModel, read_tree, tree_diff
from tests.sim.world import DAY, Hung, Killed, Unhandled, World, cached_identities

HOUR = 3600.0
KIB = 1024

# name -> what it does (and the finding of issue 25 it exposes on the code
# this harness was written against)
FAULT_KINDS = {
    "kill": "the client killed at a random await point of a backup, prune, forget or "
            "check (findings 1, 4)",
    "burst": "several nodes down at once, back later with their data (findings 2, 3, 11)",
    "destroy": "nodes gone for good (disk lost), new empty ones join; never more at once "
               "than a healthy repository survives (findings 3, 5)",
    "stale": "the nodes holding the newest root are away for a while (finding 6)",
    "replay": "a node answers with an old root it once held (finding 6)",
    "second_home": "a second home made from the key alone backs up, forgets and prunes "
                   "beside the first (finding 7)",
    "clock": "the client's wall clock jumps forward or back (finding 9, client side)",
}
# Issue 25's health classes (healthy, degraded, at risk: k + 1 or fewer
# reachable, unavailable, lost): a check that calls an object "healthy" with
# k + 1 or fewer shares fetchable is a violation too. FLUD_SIM_HEALTH_CLASSES=0
# turns that off (for a check from before the classes, which had no "at risk").
HEALTH_CLASSES = os.environ.get("FLUD_SIM_HEALTH_CLASSES", "1") == "1"
# Every kind runs in `make test`. "stale" (most of the root's holders away
# at once, one of the rest replaying an old root) found a fork after a
# handover while a writer needed one holder's answer; backup, forget, tag,
# prune and adopt now hear a majority of the root's home set
# (client/repository/head.py nodes_root). It stayed out while `check
# --repair` needed one holder and wrote a full generation (year-long
# histories found it reading a replaced home's old head: seed 70002); a
# check that hears fewer than a majority now writes a repair root, which
# never outranks a newer generation, and says its view may be stale. 100
# histories of 30 steps with every kind: 0 violations, no slower than
# without "stale" (SIM_TALLY.md).
DEFAULT_FAULTS = frozenset(FAULT_KINDS)


def faults_from_env(default=DEFAULT_FAULTS) -> frozenset:
    text = os.environ.get("FLUD_SIM_FAULTS")
    if text is None:
        return frozenset(default)
    return parse_faults(text)


def parse_faults(text: str) -> frozenset:
    text = text.strip()
    if text in ("", "none"):
        return frozenset()
    if text == "all":
        return frozenset(FAULT_KINDS)
    kinds = frozenset(t.strip() for t in text.split(",") if t.strip())
    unknown = kinds - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kind(s) {sorted(unknown)}; known: {sorted(FAULT_KINDS)}")
    return kinds


class Violation(Exception):
    """An invariant does not hold (or a job failed in a way it may not)."""


class Outcome:
    def __init__(self, seed, faults, steps=60, days=None):
        self.seed, self.faults = seed, faults
        self.max_steps, self.max_days = steps, days
        self.history = []          # one line per step
        self.violation = None      # the first violation's text, or None
        self.sim_days = 0.0
        self.steps = 0
        self.counts = {}           # op -> how many times it ran

    def replay_command(self) -> str:
        kinds = ",".join(sorted(self.faults)) or "none"
        length = f"DAYS={self.max_days:g}" if self.max_days else f"STEPS={self.max_steps}"
        return f"make simulate SEEDS=1 FROM={self.seed} FAULTS={kinds} {length}"

    def report(self) -> str:
        lines = [f"seed {self.seed} (faults: {','.join(sorted(self.faults)) or 'none'}): "
                 f"{self.violation}", "history:"]
        lines += [f"  {line}" for line in self.history]
        lines.append(f"replay: {self.replay_command()}")
        return "\n".join(lines)


@contextlib.contextmanager
def small_extents(segment_size: int, segments: int):
    """Extents of a few segments, so that files of a few hundred KiB span
    several (a large file changed in part reuses its unchanged extents).
    EXTENT_BYTES is a module constant today: a seam for the home config."""
    old = extents_module.EXTENT_BYTES
    extents_module.EXTENT_BYTES = segment_size * segments
    try:
        yield
    finally:
        extents_module.EXTENT_BYTES = old


def default_base() -> str:
    """Where histories run: memory-backed where there is one (a history
    fsyncs its index and restores often). A fixed path, not a fresh temp
    dir: the tree's absolute path is in every snapshot record, and so in
    the blob ids and placements a seed must make the same on every run."""
    return "/dev/shm/flud-sim" if os.path.isdir("/dev/shm") else "/tmp/flud-sim"


def run_history(seed: int, faults=DEFAULT_FAULTS, steps: int = 60, base: str = None,
                days: float = None) -> Outcome:
    """One history of `steps` steps, or (days given) of as many steps as
    `days` of simulated time take."""
    outcome = Outcome(seed, frozenset(faults), steps, days)
    base = base or os.path.join(os.environ.get("FLUD_SIM_DIR", default_base()), f"s{seed}")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    # the path is fixed (see default_base): two runs of one seed take turns
    with open(base + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        # What earlier histories left goes now, and what lives for the
        # process (modules, the parser) is frozen out of the collector's
        # sight: the collection each job ends with then scans what this
        # history made (those collections were an eighth of a history's
        # time, profiled). Nothing of this history is frozen.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        try:
            with small_extents(16 * KIB, 4), cached_identities():
                Simulation(seed, outcome.faults, base, outcome).run(steps, days)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return outcome


class Simulation:
    def __init__(self, seed, faults, base, outcome):
        self.rng = random.Random(seed)
        self.faults = faults
        self.base = base
        self.out = outcome
        rng = self.rng
        k, n = rng.choice([(2, 4), (3, 5), (3, 6), (4, 8)])
        nodes = rng.randint(n + 3, n + 8)
        self.world = World(base, rng, nodes, k, n, segment_size=16 * KIB,
                           small_file_limit=32 * KIB)
        self.k, self.n = k, n
        self._ns = 0
        self.tree = TreeModel(os.path.join(base, "src"), rng, self._clock_ns, 32 * KIB)
        self.homes = {"A": self.world.new_home("A")}
        self.oracle_home = self.world.new_home("oracle")
        self.fresh = 0
        self.known = {}       # record id -> expected tree
        self.acked = []       # [(record id, time)]: snapshots a backup reported, in order
        self.pending = None   # the expected tree of a killed backup (its record may be listed)
        self.verified = {}    # record id -> deletion epoch at which it restored exactly
        self.destroyed_since_clean = 0
        self.last_objects = set()
        self._head = None
        self.events = {}      # op -> events of its last complete run (where to kill it)
        self.out.history.append(f"world: {nodes} nodes, k={k} n={n}, faults "
                                f"{','.join(sorted(faults)) or 'none'}")
        for _ in range(8):
            self.tree.add_file()
        self.tree.add_dir()
        self.tree.add_large()
        self.tree.sync_times()

    def _clock_ns(self) -> int:
        self._ns += 1
        return int(self.world.now * 1e9) + self._ns

    # ---- the loop ------------------------------------------------------------

    def run(self, steps, days=None):
        try:
            for number in itertools.count() if days else range(steps):
                if days and self._days() >= days:
                    break
                self.out.steps = number + 1
                op = self._choose()
                self.out.counts[op.__name__] = self.out.counts.get(op.__name__, 0) + 1
                when = f"{number:3} t={self._days():6.2f}d"
                try:
                    line = op()
                except Violation:
                    self.out.history.append(f"{when} {op.__name__[3:]}: VIOLATION")
                    raise
                self.out.history.append(f"{when} {line}")
                self.check_invariants(op.__name__)
        except Violation as err:
            self.out.violation = str(err)
        except Exception:   # noqa: BLE001: the harness's own failure is reported too
            self.out.violation = "harness error:\n" + traceback.format_exc()
        self.out.sim_days = self._days()

    def _days(self) -> float:
        return (self.world.now - World.START) / DAY

    def _choose(self):
        f = self.faults
        menu = [(self.op_change, 30), (self.op_backup, 20), (self.op_time, 10),
                (self.op_forget, 5), (self.op_prune, 6), (self.op_check, 6),
                (self.op_verify, 3), (self.op_restore_fresh, 3)]
        if "burst" in f:
            menu += [(self.op_burst, 4), (self.op_return, 5)]
        if "destroy" in f:
            menu += [(self.op_destroy, 3)]
        if "stale" in f:
            menu += [(self.op_stale, 6), (self.op_return, 3)]
        if "replay" in f:
            menu += [(self.op_replay, 3)]
        if "second_home" in f:
            menu += [(self.op_second_home, 6)]
        if "clock" in f:
            menu += [(self.op_clock_jump, 3)]
        ops, weights = zip(*menu)
        return self.rng.choices(ops, weights)[0]

    # ---- running jobs ----------------------------------------------------------

    def _kill_at(self, name):
        """A step to kill this job at, or None (the "kill" fault's coin)."""
        if "kill" not in self.faults or self.rng.random() >= 0.35:
            return None
        return self.rng.randint(0, max(1, self.events.get(name, 300)))

    def _job(self, name, home, make, killable=True):
        """('ok', result) | ('failed', why) | ('killed', why); a violation
        for anything but a typed error."""
        kill_at = self._kill_at(name) if killable else None
        try:
            result, events = self.world.run_job(home, make, kill_at=kill_at)
        except Killed as err:
            return "killed", str(err)
        except Hung as err:
            raise Violation(f"{name} hung: {err}")
        except Unhandled as err:
            raise Violation(f"{name}: an error no part of the job handled: {err}")
        except (UserError, FludError) as err:
            return "failed", f"{type(err).__name__}: {err}"
        except Exception as err:   # noqa: BLE001
            raise Violation(f"{name} raised {type(err).__name__}: {err}\n"
                            + traceback.format_exc(limit=-6))
        self.events[name] = events
        return "ok", result

    @staticmethod
    def _args(*argv):
        args = _parser().parse_args(list(argv))
        args.summary = {}
        return args

    # ---- tree and time ---------------------------------------------------------

    def op_change(self):
        t = self.tree
        changes = [t.add_file, t.add_file, t.add_large, t.add_dir, t.add_link, t.delete,
                   t.delete, t.delete_dir, t.edit, t.edit, t.append, t.append, t.chmod,
                   t.rename_dir, t.bring_back, t.bring_back]
        done = [self.rng.choice(changes)() for _ in range(self.rng.randint(1, 3))]
        self.world.now += self.rng.uniform(1, 2 * HOUR)
        t.sync_times()
        return "change: " + "; ".join(done)

    def op_time(self):
        gone = self.rng.choice([HOUR, 6 * HOUR, DAY, 2 * DAY, 4 * DAY, 9 * DAY])
        self.world.now += gone
        return f"time passes: {gone / HOUR:.0f} h"

    def op_clock_jump(self):
        jump = self.rng.choice([-30 * DAY, -2 * DAY, -HOUR, HOUR, 3 * DAY, 40 * DAY, 200 * DAY])
        self.world.skew += jump
        return f"client clock jumps {jump / DAY:+.1f} days (skew {self.world.skew / DAY:+.1f} d)"

    # ---- client jobs -----------------------------------------------------------

    def op_backup(self, home_name="A"):
        home = self.homes[home_name]
        expected = self.tree.expected()
        created = self.world.wall()
        src = self.tree.root

        def make(clock, home_, network, ctx):
            return Backup(clock, home_, network, ctx.pool, ctx.monitor, ctx.progress,
                          clock=clock.seconds).run([src])
        status, result = self._job("backup", home, make)
        if status == "ok":
            record = result["record"]
            self.known[record] = expected
            self.acked.append((record, created))
            self.pending = None
            return (f"backup ({home_name}) -> snapshot {result['snapshot']} "
                    f"[{record[:8]}] {result['new']} new {result['changed']} changed")
        if status == "killed":
            self.pending = (expected, created)
        return f"backup ({home_name}) {status}: {_short(result)}"

    def op_forget(self, home_name="A"):
        keep = self.rng.randint(1, 4)
        args = self._args("forget", "--home", self.homes[home_name], "--keep-last", str(keep))
        from flud.cli import retain

        status, result = self._job("forget", self.homes[home_name],
                                   lambda clock, home, network, ctx: retain.forget(ctx, args))
        if status != "failed":
            # the `keep` newest snapshots must stay listed whatever happened;
            # older ones stay required only while they are listed
            self._forgotten(keep)
        return f"forget --keep-last {keep} ({home_name}) {status}: {_short(result)}"

    def _forgotten(self, keep):
        head = self.head()
        listed = set(head.ids)
        newest = {r for r, _ in sorted(self.acked, key=lambda a: a[1])[-keep:]}
        self.acked = [(r, t) for r, t in self.acked if r in newest or r in listed]

    def op_prune(self, home_name="A"):
        args = self._args("prune", "--home", self.homes[home_name], "--grace", "0")
        from flud.cli import retain

        self.world.now += self.rng.choice([60.0, HOUR, DAY])
        status, result = self._job("prune", self.homes[home_name],
                                   lambda clock, home, network, ctx: retain.prune(ctx, args))
        summary = args.summary.get("prune", {})
        return (f"prune ({home_name}) {status}: deleted {summary.get('deleted', '?')}, "
                f"pending {summary.get('pending', '?')} {_short(result)}")

    def op_check(self):
        args = self._args("check", "--home", self.homes["A"], "--repair")
        from flud.cli import check

        # What check judges is the map it found; the page and head it writes
        # itself (with fewer nodes up, at reduced redundancy) come after.
        judged = {obj.object_id for obj in self.head().objects} - self._pruning("A")
        status, result = self._job("check", self.homes["A"],
                                   lambda clock, home, network, ctx: check.check(ctx, args))
        summary = args.summary
        counts = summary.get("counts", {})
        if status == "ok":
            self._check_honest(summary, judged)
            # "clean": nothing left that one more lost disk could make
            # unreadable (an object repaired only to k + 1 is not)
            troubled = [o for o in summary.get("objects", ())
                        if o["state"] != "repaired" or o["error"]
                        or o["confirmed"] <= self.k + 1]
            if not troubled:
                self.destroyed_since_clean = 0
        return f"check --repair {status}: {counts} {_short(result)}"

    def _thinnest_margin(self) -> int:
        """Of the objects a listed snapshot needs: the fewest distinct
        existing nodes holding one of an object's shares, minus its k."""
        head = self.head()
        if head.error or not head.listed:
            return self.n - self.k
        needed = oracle.needed_objects(self.world, self.oracle_home, head.listed)
        keys = oracle.keysets(self.world)
        margins = [len({s.node for s in obj.shares if not oracle.missing(s, keys)
                        and bytes.fromhex(s.node) in keys}) - obj.k
                   for obj in head.objects if obj.object_id in needed]
        return min(margins, default=self.n - self.k)

    def _pruning(self, home_name) -> frozenset:
        """Objects the home's prune has begun to delete: check leaves them
        out of its counts (and says how many), so it calls them nothing. A
        backup may have stored one again since (same content, same id);
        the next prune cancels its delete."""
        from flud.client.index import ClientIndex
        from flud.client.repository.prune_books import pending_object_ids
        index = ClientIndex(os.path.join(self.homes[home_name], "index.sqlite"))
        try:
            return pending_object_ids(index)
        finally:
            index.close()

    def _check_honest(self, summary, judged):
        """No object check calls readable (of those in the map it judged)
        is unreadable by a restore now."""
        states = {o["id"]: o["state"] for o in summary.get("objects", ())}
        head = self.head()
        needed = oracle.needed_objects(self.world, self.oracle_home, head.listed)
        keys = oracle.keysets(self.world)
        for obj in head.objects:
            if obj.object_id not in needed or obj.object_id not in judged:
                continue   # garbage on its way out, or written by this check after it judged
            if summary.get("unconfirmed"):
                # check said the head it read may not be the newest (it heard
                # fewer than a majority of the root's holders; exit 1): what
                # it reports is of that head, whose repairs a newer head
                # written by another home does not carry (seed 80014)
                continue
            state = states.get(obj.object_id, "healthy")
            if state in oracle.UNREADABLE_STATES:
                continue
            readable = oracle.readable(self.world, obj, keys)
            if readable < obj.k:
                raise Violation(f"check calls {obj.kind} {obj.object_id[:16]} {state!r} but a "
                                f"restore can fetch only {readable} of the {obj.k} shares "
                                f"it needs")
            if HEALTH_CLASSES and state == "healthy" and readable <= obj.k + 1:
                raise Violation(f"check calls {obj.kind} {obj.object_id[:16]} 'healthy' but "
                                f"only {readable} of its shares can be fetched now (k={obj.k}: "
                                f"at risk)")

    def op_verify(self):
        args = self._args("verify", "--home", self.homes["A"])
        from flud.cli import jobs

        def make(clock, home, network, ctx):
            return jobs._verify(clock, home, network, ctx.pool, ctx.monitor, ctx.progress, args)
        status, result = self._job("verify", self.homes["A"], make, killable=False)
        if status == "ok" and result == EXIT_OK:
            # verify says every share is confirmed: the newest snapshot restores now
            problem = self._restore_now(self.homes["A"])
            if problem:
                raise Violation(f"verify exits 0 but a restore of the newest snapshot "
                                f"now fails: {problem}")
        return f"verify {status}: {_short(result)}"

    def _restore_now(self, home_path):
        """None if the newest snapshot restores with the nodes up now (as
        `flud restore` would find it) to the tree recorded; else what failed
        (a typed failure counts: verify promised it would work)."""
        status, result = self._restore_newest(home_path)
        if status != "ok":
            return result
        return None

    def _restore_newest(self, home_path):
        """('ok', None) | ('failed', why) | ('wrong', why): `flud restore`
        of the newest snapshot from home_path with the nodes up now."""
        dest = os.path.join(self.base, "restore-out")
        shutil.rmtree(dest, ignore_errors=True)

        @defer.inlineCallbacks
        def make(clock, home, network, ctx):
            found = yield find_snapshot(ctx)
            try:
                job = Restore(clock, home, network, ctx.pool, ctx.monitor, ctx.progress,
                              {"k": ctx.coder.k, "n": ctx.coder.n,
                               "bundles": found.repo.bundles},
                              block_writer=InlineBlockWriter, sync=lambda fd: None)
                summary = yield TreeRestore(job, found.repo, found.record).run(dest)
                return summary, found.record_id, job.failed, found.repo.unconfirmed
            finally:
                found.close()
        try:
            status, result = self._job("restore", home_path, make, killable=False)
            if status != "ok":
                return "failed", result
            summary, record_id, failed, unconfirmed = result
            if summary["failed"]:
                return "failed", f"{summary['failed']} failed: {failed[:2]}"
            if unconfirmed:   # `flud restore` says so and exits 1: not a success
                return "unsure", unconfirmed
            head = self.head()
            newest = head.ids[-1] if head.ids else None
            if record_id != newest:
                return "wrong", (f"restored snapshot record {record_id[:8]}, but the newest "
                                 f"the nodes hold is {str(newest)[:8]}")
            names = os.listdir(dest)
            diff = tree_diff(self.known.get(record_id, {}),
                             read_tree(os.path.join(dest, names[0])))
            if diff:
                return "wrong", "restored tree differs: " + "; ".join(diff)
            return "ok", None
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def op_restore_fresh(self):
        """`flud restore` from a home made from the key alone, nodes as they are."""
        self.fresh += 1
        home = self.world.new_home(f"fresh{self.fresh}")
        try:
            status, why = self._restore_newest(home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        if status == "wrong":
            raise Violation(f"restore from the key alone exits 0 with the wrong tree: {why}")
        return f"restore from the key alone {status} {_short(why)}"

    def op_second_home(self):
        if "B" not in self.homes:
            self.homes["B"] = self.world.new_home("B")
        op = self.rng.choice([self.op_backup, self.op_backup, self.op_forget, self.op_prune,
                              self.op_adopt, self.op_adopt])
        return op(self.rng.choice("AB") if op == self.op_adopt else "B")

    def op_adopt(self, home_name):
        """`flud adopt`: this home takes over writing (where the code has it);
        the other home is refused from then on."""
        from flud.client.repository import head_adopt
        status, result = self._job("adopt", self.homes[home_name],
                                   lambda clock, home, network, ctx: head_adopt.adopt(ctx))
        return f"adopt ({home_name}) {status}: {_short(result if status != 'ok' else '')}"

    # ---- nodes -----------------------------------------------------------------

    def op_burst(self):
        """A house loses power: several nodes at once."""
        up = self.world.up_ids()
        count = min(len(up) - 1, self.rng.randint(2, max(2, self.n - self.k + 1)))
        gone = self.rng.sample(up, count)
        for node_id in gone:
            self.world.set_down(node_id)
        return f"burst: {count} nodes down ({_ids(gone)})"

    def op_return(self):
        down = [i for i, node in self.world.nodes.items() if not node.up and not node.destroyed]
        if not down:
            return "no node is down"
        back = self.rng.sample(down, self.rng.randint(1, len(down)))
        for node_id in back:
            self.world.set_up(node_id)
        for node in self.world.nodes.values():
            node.replay = None
        return f"back: {_ids(back)} (and no node replays an old root)"

    def op_destroy(self):
        """Disks lost for good, at most n-k-1 since the last clean check
        --repair, and never more than the thinnest needed object survives
        with one share to spare (one stored at reduced redundancy while most
        nodes were away, and not raised since, survives fewer)."""
        budget = self.n - self.k - 1 - self.destroyed_since_clean
        if budget <= 0:
            return "no destroy (budget used: awaiting a clean check --repair)"
        budget = min(budget, self._thinnest_margin() - 1)
        if budget <= 0:
            return "no destroy (an object needed is stored on k + 1 nodes or fewer)"
        count = self.rng.randint(1, min(2, budget))
        gone = self.rng.sample(self.world.existing(), count)
        extents = [o for o in self.head().objects if o.kind == "extent"]
        if extents and self.rng.random() < 0.5:
            # an adversary's choice: holders of one large file's extent, the
            # nodes whose loss a map that went back would not survive
            named = sorted({bytes.fromhex(s.node) for s in self.rng.choice(extents).shares}
                           & set(self.world.existing()))
            gone = self.rng.sample(named, min(count, len(named))) or gone
        for node_id in gone:
            self.world.destroy(node_id)
            self.world.add_node()
        self.destroyed_since_clean += count
        return f"destroy: {_ids(gone)} gone for good, {count} new empty node(s) join"

    def op_stale(self):
        """The nodes holding the newest root go away, and one that stays
        answers with an older root it once held (it missed the newer puts,
        or replays): what a client finds now is a stale head."""
        up = self.world.up_ids()
        owner = self.world.client_id
        latest = max(up, key=lambda i: self.world.nodes[i].last_put, default=None)
        if latest is None or not self.world.nodes[latest].last_put:
            return "stale: no root on the nodes yet"
        record = self.world.nodes[latest].true_root(owner)   # one put: the same bytes on each
        holders = [i for i in up if self.world.nodes[i].last_put and
                   self.world.nodes[i].true_root(owner) == record]
        witnesses = [i for i in holders if len(self.world.nodes[i].root_history[owner]) > 1]
        if not witnesses:
            return "stale: no node has an older root to answer with"
        witness = self.rng.choice(witnesses)
        node = self.world.nodes[witness]
        node.replay = self.rng.randrange(len(node.root_history[owner]) - 1)
        away = [i for i in holders if i != witness]
        for node_id in away:
            self.world.set_down(node_id)
        return (f"stale: {len(away)} holders of the newest root go away ({_ids(away)}); "
                f"{_ids([witness])} answers with its root #{node.replay}")

    def op_replay(self):
        nodes = [i for i in self.world.up_ids()
                 if len(self.world.nodes[i].root_history.get(self.world.client_id, ())) > 1]
        if not nodes:
            return "no node has an old root to replay"
        node_id = self.rng.choice(nodes)
        node = self.world.nodes[node_id]
        if node.replay is not None:
            node.replay = None
            return f"replay: {_ids([node_id])} stops replaying"
        node.replay = self.rng.randrange(len(node.root_history[self.world.client_id]) - 1)
        return f"replay: {_ids([node_id])} answers with its root #{node.replay}"

    # ---- invariants ------------------------------------------------------------

    def head(self):
        """The oracle's head, read again only when a root was put, a share
        deleted or a disk lost since it was last read."""
        key = (sum(n.puts for n in self.world.nodes.values()), _epoch(self.world))
        if self._head is None or self._head[0] != key:
            self._head = (key, oracle.read_head(self.world, self.oracle_home))
        return self._head[1]

    def check_invariants(self, op_name):
        head = self.head()
        if head.error and (self.acked or head.listed):
            raise Violation(f"the head cannot be read with every node up: {head.error}")
        listed = head.ids
        # a killed backup may have published: its snapshot is then listed
        unknown = [r for r in listed if r not in self.known]
        if unknown and self.pending is not None and len(unknown) == 1:
            self.known[unknown[0]] = self.pending[0]
            self.acked.append((unknown[0], self.pending[1]))
            self.pending = None
            unknown = []
        if unknown:
            raise Violation(f"the head lists snapshot record(s) {[u[:8] for u in unknown]} "
                            f"that no backup made")
        missing = [r for r, _ in self.acked if r not in listed]
        if missing:
            raise Violation(f"snapshot record(s) {[m[:8] for m in missing]} that a backup "
                            f"reported (and no forget removed) are no longer listed by the "
                            f"head (generation {head.generation})")
        epoch = _epoch(self.world)
        wanted = [(blob_id, record, self.known[blob_id]) for blob_id, record in head.listed
                  if self.verified.get(blob_id) != epoch]
        found = oracle.restore_each_exactly(self.world, self.oracle_home, wanted,
                                            self.base) if wanted else {}
        for blob_id, record, _ in wanted:
            problems = found[blob_id]
            if problems:
                raise Violation(f"snapshot {record.snapshot_id} [{blob_id[:8]}] does not "
                                f"restore (every node up) to the tree it recorded: "
                                + "; ".join(problems))
            self.verified[blob_id] = epoch
        if op_name in ("op_backup", "op_second_home"):
            self._new_objects_stored(head)
        else:   # what other jobs wrote (prune's map pages, repairs) is not a backup's
            self.last_objects = {obj.object_id for obj in head.objects}

    def _new_objects_stored(self, head):
        """Every share of an object that first appears in the map now is on
        the node the map names (unless that node's disk is gone)."""
        keys = oracle.keysets(self.world)
        current = set()
        for obj in head.objects:
            current.add(obj.object_id)
            if obj.object_id in self.last_objects:
                continue
            wrong = [s for s in obj.shares if oracle.missing(s, keys)]
            if wrong:
                raise Violation(f"the map names {obj.kind} {obj.object_id[:16]}'s shares on "
                                f"nodes that do not hold them: "
                                + ", ".join(f"#{s.index} on {s.node[:8]}" for s in wrong))
        self.last_objects = current


@functools.lru_cache(maxsize=1)
def _parser():
    """The CLI's parser, built once: building it took 60 ms, a sixth of a
    history's time (profiled: 85 builds in 120 simulated days). Parsing
    does not change it (argparse copies an append action's default)."""
    from flud.cli.main import build_parser
    return build_parser()


def _epoch(world) -> tuple:
    """Changes only when something that a restore reads may have gone."""
    return (sum(n.deletes for n in world.nodes.values()),
            sum(1 for n in world.nodes.values() if n.destroyed))


def _ids(ids) -> str:
    return ",".join(i[:2].hex() for i in ids)


def _short(value) -> str:
    text = "" if value is None else str(value)
    return text if len(text) < 160 else text[:157] + "..."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="one simulated history")
    parser.add_argument("seed", type=int)
    parser.add_argument("--faults", default=None)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    faults = parse_faults(args.faults) if args.faults is not None else faults_from_env()
    outcome = run_history(args.seed, faults, args.steps)
    print("\n".join(outcome.history))
    print(outcome.violation or "ok")
    return 1 if outcome.violation else 0
