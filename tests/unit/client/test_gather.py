"""gather(): every outcome, in order, and nothing kept once the caller lets go."""
import gc
import weakref

from twisted.internet import defer

from flud.client.gather import gather, settle_all


class Payload:
    """Stands for a RETRIEVE answer: something large to let go of."""


def test_outcomes_come_in_order_with_failures_consumed():
    first, second, third = defer.Deferred(), defer.Deferred(), defer.Deferred()
    got = []
    gather([first, second, third]).addCallback(got.append)
    third.callback("c")
    second.errback(ValueError("bad"))
    assert got == []  # not before every one fired
    first.callback("a")
    (ok1, a), (ok2, failure), (ok3, c) = got[0]
    assert (ok1, a, ok3, c) == (True, "a", True, "c")
    assert not ok2 and failure.check(ValueError)
    assert second.result is None  # consumed: no unhandled error is logged


def test_no_reference_cycle_keeps_an_answer_alive():
    gc.disable()  # what a DeferredList leaves only the collector can free
    try:
        payload = Payload()
        alive = weakref.ref(payload)
        request = defer.Deferred()
        got = []
        gather([request]).addCallback(got.append)
        request.callback(payload)
        del payload
        assert got[0][0][1] is alive()
        got.clear()
        assert alive() is None
    finally:
        gc.enable()


def test_settle_all_raises_the_first_failure_once_all_are_done():
    first, second = defer.Deferred(), defer.Deferred()
    outcome = []
    settle_all([first, second]).addBoth(outcome.append)
    first.errback(KeyError("gone"))
    assert outcome == []
    second.callback(1)
    assert outcome[0].check(KeyError)
    assert gather([]).result == []
