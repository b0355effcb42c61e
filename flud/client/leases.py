"""Keeping this owner's leases alive on every node (DESIGN.md "Leases,
trash and compaction"): a node trashes the data of an owner it has not
heard from for its lease period (90 days by default), and a backup talks
only to the nodes it stores on that run. So, at most once every
RENEW_EVERY, a job asks every node it knows one small authenticated
question (ROOT_GET, a few KiB): a client that backs up (or checks) at least
once per lease period keeps everything it stored alive."""
from twisted.internet import defer

from flud.client.context import wall_clock
from flud.protocol.errors import ErrorCode

RENEW_EVERY = 7 * 86400.0
META = "leases_renewed"
AT_ONCE = 16


@defer.inlineCallbacks
def renew_leases(ctx, now=None, force=False):
    """Returns how many nodes answered (0 if it was not due). now: the wall
    clock (default: client/context.py's, read when called)."""
    now = now or wall_clock
    index = ctx.index
    if not force and now() - index.get_meta(META, 0) < RENEW_EVERY:
        return 0
    slots = defer.DeferredSemaphore(AT_ONCE)
    results = yield defer.DeferredList(
        [slots.run(ctx.network.call, node_id, "root_get") for node_id in ctx.network.alive_ids()],
        consumeErrors=True)
    # NOT_FOUND (no root record there) renews the lease all the same
    answered = sum(1 for ok, value in results
                   if ok or getattr(value.value, "code", None) == ErrorCode.NOT_FOUND)
    index.set_meta(META, now())
    return answered
