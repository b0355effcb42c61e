import queue
import threading

import pytest
from twisted.python.threadpool import ThreadPool

from flud.errors import FludError
from flud.workers import DEFAULT_MAX_QUEUED, CPUPool, PoolSaturated


class FakeReactor:
    """callFromThread runs at once; system event triggers are recorded."""

    def __init__(self):
        self.triggers = {}
        self._next_id = 0

    def callFromThread(self, fn, *args, **kwargs):
        fn(*args, **kwargs)

    def addSystemEventTrigger(self, phase, event, fn, *args):
        self._next_id += 1
        self.triggers[self._next_id] = (phase, event, fn)
        return self._next_id

    def removeSystemEventTrigger(self, trigger_id):
        del self.triggers[trigger_id]

    def fire_shutdown(self):
        for phase, event, fn in list(self.triggers.values()):
            if (phase, event) == ("during", "shutdown"):
                fn()


class FakeThreadPool:
    """Holds submitted jobs until the test runs them; no threads."""

    instances = []

    def __init__(self, minthreads, maxthreads, name):
        self.maxthreads = maxthreads
        self.name = name
        self.jobs = []
        self.started = self.stopped = False
        FakeThreadPool.instances.append(self)

    def start(self):
        self.started = True

    def stop(self):
        self.stopped = True

    def callInThreadWithCallback(self, on_result, fn, *args, **kwargs):
        self.jobs.append((on_result, fn, args))

    def run_next(self):
        on_result, fn, args = self.jobs.pop(0)
        try:
            result = fn(*args)
        except Exception as exc:
            on_result(False, exc)
        else:
            on_result(True, result)


@pytest.fixture
def reactor():
    return FakeReactor()


def fake_pool(reactor, **kwargs):
    FakeThreadPool.instances.clear()
    return CPUPool(reactor, threadpool_factory=FakeThreadPool, **kwargs)


def results_of(d):
    box = []
    d.addBoth(box.append)
    return box


def test_inline_runs_synchronously(reactor):
    pool = CPUPool(reactor, inline=True)
    assert results_of(pool.run(lambda a, b: a + b, 2, 3)) == [5]
    assert not pool.running and reactor.triggers == {}


def test_inline_failure_is_a_failed_deferred(reactor):
    pool = CPUPool(reactor, inline=True)
    [failure] = results_of(pool.run(lambda: 1 / 0))
    assert failure.check(ZeroDivisionError)


def test_pool_starts_lazily_with_bounded_threads(reactor):
    pool = fake_pool(reactor, size=3)
    assert FakeThreadPool.instances == [] and not pool.running
    box = results_of(pool.run(pow, 2, 10))
    [threadpool] = FakeThreadPool.instances
    assert threadpool.started and threadpool.maxthreads == 3
    assert box == [] and pool._outstanding == 1
    threadpool.run_next()
    assert box == [1024] and pool._outstanding == 0


def test_failures_come_back_as_failures(reactor):
    pool = fake_pool(reactor)
    box = results_of(pool.run(int, "not a number"))
    FakeThreadPool.instances[0].run_next()
    assert box[0].check(ValueError)
    assert pool._outstanding == 0


def test_saturation_is_a_typed_error_not_growth(reactor):
    pool = fake_pool(reactor, size=2, max_queued=3)
    for _ in range(5):  # 2 running + 3 waiting
        pool.run(len, b"x")
    assert pool.queued == 3
    with pytest.raises(PoolSaturated, match="limit 3") as info:
        pool.run(len, b"x")
    assert isinstance(info.value, FludError)
    assert pool._outstanding == 5
    FakeThreadPool.instances[0].run_next()
    pool.run(len, b"x")  # room again
    assert pool._outstanding == 5


def test_default_queue_bound(reactor):
    assert fake_pool(reactor).max_queued == DEFAULT_MAX_QUEUED == 64


def test_stop_stops_threads_and_removes_shutdown_trigger(reactor):
    pool = fake_pool(reactor)
    pool.run(len, b"")
    assert len(reactor.triggers) == 1
    pool.stop()
    assert FakeThreadPool.instances[0].stopped
    assert reactor.triggers == {} and not pool.running
    pool.stop()  # idempotent
    pool.run(len, b"")  # restarts lazily
    assert len(FakeThreadPool.instances) == 2 and pool.running


def test_reactor_shutdown_stops_the_pool(reactor):
    pool = fake_pool(reactor)
    pool.run(len, b"")
    reactor.fire_shutdown()
    assert FakeThreadPool.instances[0].stopped and not pool.running


@pytest.mark.parametrize("kwargs", [{"size": 0}, {"max_queued": -1}])
def test_rejects_bad_bounds(reactor, kwargs):
    with pytest.raises(ValueError):
        CPUPool(reactor, **kwargs)


def test_real_threads_run_off_the_calling_thread():
    # Results are delivered through callFromThread; this reactor stand-in
    # queues them for the test thread to run, like the real reactor would.
    delivered = queue.Queue()

    class QueueReactor(FakeReactor):
        def callFromThread(self, fn, *args, **kwargs):
            delivered.put((fn, args))

    reactor = QueueReactor()
    pool = CPUPool(reactor, size=2, threadpool_factory=ThreadPool)
    try:
        boxes = [results_of(pool.run(threading.current_thread)) for _ in range(4)]
        for _ in range(4):
            fn, args = delivered.get(timeout=10)
            fn(*args)
    finally:
        pool.stop()
    threads = {box[0] for box in boxes}
    assert threading.current_thread() not in threads
    assert 1 <= len(threads) <= 2
    assert pool._outstanding == 0
