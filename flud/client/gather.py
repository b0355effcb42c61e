"""Waiting for many Deferreds."""
from twisted.internet import defer


@defer.inlineCallbacks
def settle_all(deferreds):
    """Wait for every Deferred; then raise the first failure, unwrapped.

    Unlike gatherResults, nothing is left running when the error surfaces,
    so the caller can release what those operations hold."""
    results = yield defer.DeferredList(list(deferreds), consumeErrors=True)
    for ok, value in results:
        if not ok:
            value.raiseException()
    return [value for _, value in results]
