"""Waiting for many Deferreds, without keeping what they carried.

A DeferredList and its Deferreds point at each other, and each Deferred keeps
its last result: whatever the requests answered (RETRIEVE buffers, say) stays
in a reference cycle until the garbage collector's next full pass, long after
the caller dropped it. A 1 GiB restore so held ~24 MiB of answers it had
already written. gather() forms no cycle and leaves each Deferred holding None.
"""
from twisted.internet import defer
from twisted.python.failure import Failure


def gather(deferreds) -> defer.Deferred:
    """Fires with [(True, value) or (False, Failure)], in order, once every
    Deferred fired (their failures are consumed)."""
    deferreds = list(deferreds)
    done = defer.Deferred()
    results = [None] * len(deferreds)
    left = [len(deferreds)]

    def one(outcome, i):
        results[i] = (not isinstance(outcome, Failure), outcome)
        left[0] -= 1
        if not left[0]:
            done.callback(results)
        return None  # the Deferred lets go of its result

    for i, d in enumerate(deferreds):
        d.addBoth(one, i)
    if not deferreds:
        done.callback(results)
    return done


@defer.inlineCallbacks
def settle_all(deferreds):
    """Wait for every Deferred; then raise the first failure, unwrapped.

    Unlike gatherResults, nothing is left running when the error surfaces,
    so the caller can release what those operations hold."""
    results = yield gather(deferreds)
    for ok, value in results:
        if not ok:
            value.raiseException()
    return [value for _, value in results]
