"""flud.lean imports twisted.internet.defer without asyncio: Deferreds,
coroutines and a later real asyncio must all still work. Each case runs in a
fresh interpreter, since the point is what gets imported."""
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_deferreds_and_coroutines_work_without_asyncio_then_real_asyncio_imports():
    out = run("""
        import sys
        from flud.lean import defer_unused_imports
        defer_unused_imports()
        assert "asyncio" not in sys.modules, sorted(m for m in sys.modules if "asyncio" in m)
        from twisted.internet import defer, task

        async def double(d):
            return 2 * (await d)

        # ensureDeferred / fromCoroutine with a coroutine awaiting a Deferred
        source = defer.Deferred()
        result = defer.ensureDeferred(double(source))
        source.callback(21)
        assert result.result == 42, result.result
        assert defer.Deferred.fromCoroutine(double(defer.succeed(4))).result == 8
        try:
            defer.Deferred.fromCoroutine(42)
        except defer.NotACoroutineError:
            pass
        else:
            raise AssertionError("42 is not a coroutine")

        # inlineCallbacks: a generator, and one yielding a coroutine
        @defer.inlineCallbacks
        def gen(d):
            value = yield d
            doubled = yield double(defer.succeed(value))
            return doubled + 1

        source = defer.Deferred()
        result = gen(source)
        source.callback(5)
        assert result.result == 11, result.result

        # errors travel through coroutines
        async def fails():
            raise ValueError("boom")

        errors = []
        defer.ensureDeferred(fails()).addErrback(lambda f: errors.append(f.type))
        assert errors == [ValueError], errors

        # with a real clock
        clock = task.Clock()

        async def later():
            await task.deferLater(clock, 1.0, lambda: None)
            return "done"

        d = defer.ensureDeferred(later())
        clock.advance(1.0)
        assert d.result == "done"
        assert "asyncio" not in sys.modules

        # A later real `import asyncio` is the whole package, and works.
        import asyncio
        import asyncio.base_events
        assert asyncio.__file__.endswith("asyncio/__init__.py")
        assert asyncio.run(double(asyncio.sleep(0, result=10))) == 20
        assert defer.Future is asyncio.Future
        assert defer.AbstractEventLoop is asyncio.AbstractEventLoop

        loop = asyncio.new_event_loop()
        try:
            d = defer.Deferred()
            future = d.asFuture(loop)
            d.callback("via future")
            assert loop.run_until_complete(future) == "via future"
            fut = loop.create_future()
            back = defer.Deferred.fromFuture(fut)
            fut.set_result(7)
            loop.run_until_complete(asyncio.sleep(0))
            assert back.result == 7
        finally:
            loop.close()
        try:
            defer.NoSuchName
        except AttributeError:
            pass
        else:
            raise AssertionError("defer.NoSuchName exists")
        print("ok")
    """)
    assert out == "ok"


def test_annotation_names_import_asyncio_on_first_use():
    out = run("""
        import sys
        from flud.lean import _defer_stand_ins, import_sparing; import_defer_without_asyncio = lambda: import_sparing("twisted.internet.defer", "asyncio", _defer_stand_ins, lazy=("AbstractEventLoop", "Future"))  # noqa: E731,E501
        assert import_defer_without_asyncio() is True
        from twisted.internet import defer
        assert "asyncio" not in sys.modules
        future = defer.Future
        import asyncio
        assert future is asyncio.Future and "Future" in vars(defer)
        print("ok")
    """)
    assert out == "ok"


def test_falls_back_to_the_real_asyncio_if_the_stand_in_cannot_be_built():
    out = run("""
        import sys
        import flud.lean as lean

        def broken():
            raise OSError("no coroutines.py")

        lean._stdlib_iscoroutine = broken
        assert lean.import_sparing("twisted.internet.defer", "asyncio", lean._defer_stand_ins, lazy=("AbstractEventLoop", "Future")) is False
        from twisted.internet import defer
        import asyncio
        assert defer.iscoroutine is asyncio.iscoroutine and defer.Future is asyncio.Future
        print("ok")
    """)
    assert out == "ok"


def test_nothing_to_do_when_defer_or_asyncio_is_already_imported():
    out = run("""
        import asyncio
        from flud.lean import _defer_stand_ins, import_sparing; import_defer_without_asyncio = lambda: import_sparing("twisted.internet.defer", "asyncio", _defer_stand_ins, lazy=("AbstractEventLoop", "Future"))  # noqa: E731,E501
        assert import_defer_without_asyncio() is False
        from twisted.internet import defer
        assert defer.iscoroutine is asyncio.iscoroutine
        print("ok")
    """)
    assert out == "ok"
