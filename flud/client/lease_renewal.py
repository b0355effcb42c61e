"""Keeping this owner's leases alive on every node (DESIGN.md "Leases,
trash and compaction"): a node trashes the data of an owner it has not
heard from for its lease period (a year by default), and a job talks only
to the nodes it needs. So every client job (backup, restore, verify,
check, forget, prune, tag: flud/cli/jobs.py) starts by asking, when due,
every node it knows one small authenticated question (STATS, which also
says how long that node keeps an owner's data): a client that runs any job
at least once per lease period keeps everything it stored alive, even when
the job itself then fails.

A renewal is due a week after the last one recorded, or at once when this
machine's clock reads earlier than that record (a clock set back must not
stop renewals for as long as it went back). It is recorded only when most
known nodes answered: a run with the network down renews nothing and must
not count, the next job tries again.

What the user is told (`flud ls`, `key export`, the status page): the
nodes keep this home's data at least until the last recorded renewal plus
the shortest lease the answering nodes reported (`kept_until`); the
renewal's start, not its end, is the time recorded."""
import time

from flud.client.context import wall_clock

DAY = 86400.0
RENEW_EVERY = 7 * DAY
META = "leases_renewed"        # wall time at which the last recorded renewal started
META_LEASE = "lease_seconds"   # the shortest lease the nodes answering it reported
AT_ONCE = 16
# What a node that does not report its lease is taken to keep: the least a
# node accepts (flud/node/config.py MIN_LEASE), so the date shown is never late.
LEAST_LEASE = 14 * DAY
JOBS_THAT_RENEW = ("backup", "restore", "verify", "check", "forget", "prune", "tag")


def renewal_due(last, now: float, force: bool = False) -> bool:
    """last: the recorded renewal's time (None: never)."""
    return force or last is None or now < last or now - last >= RENEW_EVERY


def renew_leases(ctx, now=None, force=False):
    """Ask every node ctx.network knows, if a renewal is due. Returns a
    Deferred of how many nodes answered (0 if it was not due). now: the
    wall clock (default: client/context.py's, read when called)."""
    # Twisted is imported here, not above: `flud ls` and `key export` read
    # kept_until_line() and need no reactor (its import is most of their time).
    from twisted.internet import defer

    now = now or wall_clock
    index, network = ctx.index, ctx.network
    held = _RUNNING.get(id(index))
    running = held[1] if held is not None and held[0] is index else None
    if running is not None:
        # One renewal at a time per home (a job's own, e.g. a backup's at its
        # end, may come while the one begun beside its start still runs):
        # this one waits for it, then asks again whether one is due.
        return _after(running).addCallback(lambda _: renew_leases(ctx, now, force))
    started = now()
    if not renewal_due(index.get_meta(META), started, force):
        return defer.succeed(0)
    known = len(network.nodes)   # now: the walks may add nodes while it runs
    slots = defer.DeferredSemaphore(AT_ONCE)
    asked = defer.DeferredList(
        [slots.run(network.stats, node_id) for node_id in network.alive_ids()],
        consumeErrors=True)

    def record(results):
        answers = [value for ok, value in results if ok]
        if 2 * len(answers) > known:
            index.set_meta(META, started)
            index.set_meta(META_LEASE, min(_lease_of(a) for a in answers))
        return len(answers)
    renewal = asked.addCallback(record)
    if not renewal.called:
        key = id(index)
        _RUNNING[key] = (index, renewal)   # (held: its id is not reused while in here)
        renewal.addBoth(_ended, key)
    return renewal


_RUNNING = {}   # id(a home's index) -> (that index, its renewal under way)


def _ended(result, key):
    _RUNNING.pop(key, None)
    return result


def _after(running):
    """A Deferred that fires (with None) once `running` has, whatever its result."""
    from twisted.internet import defer

    waiter = defer.Deferred()

    def release(result):
        waiter.callback(None)
        return result
    running.addBoth(release)
    return waiter


def _lease_of(stats) -> float:
    """The lease a node's STATS answer reports (LEAST_LEASE if it does not)."""
    try:
        seconds = float(stats["leases"]["lease_seconds"])
    except (KeyError, TypeError, ValueError):
        return LEAST_LEASE
    return seconds if seconds > 0 else LEAST_LEASE


def kept_until(index):
    """{renewed, lease_seconds, kept_until} of the last recorded renewal, or None."""
    renewed = index.get_meta(META)
    if renewed is None:
        return None
    lease = index.get_meta(META_LEASE) or LEAST_LEASE
    return {"renewed": renewed, "lease_seconds": lease, "kept_until": renewed + lease}


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t))


def kept_until_line(index) -> str:
    """One sentence for the user: until when the nodes keep this home's data."""
    jobs = ", ".join(JOBS_THAT_RENEW[:-1]) + " or " + JOBS_THAT_RENEW[-1]
    known = kept_until(index)
    if known is None:
        return (f"leases: not renewed yet; the nodes keep an owner's data for their lease "
                f"(a year by default) after a job last reached them, and every {jobs} "
                f"renews it")
    return (f"leases: the nodes keep this home's data until at least "
            f"{_date(known['kept_until'])} (renewed {_date(known['renewed'])}, "
            f"{known['lease_seconds'] / DAY:.0f}-day lease); every {jobs} renews it")
