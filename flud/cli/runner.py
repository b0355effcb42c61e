"""One reactor run per command: a Twisted reactor cannot be restarted."""
from twisted.internet import defer


def run_reactor(fn, signals: bool = False):
    """Run fn(reactor) -> Deferred under a fresh reactor; return its result.
    signals: install Twisted's signal handlers (SIGCHLD among them: a
    process that spawns children learns when they end)."""
    from twisted.internet import reactor  # installs the default reactor: only when run

    outcome = {}

    def start():
        d = defer.maybeDeferred(fn, reactor)
        d.addCallbacks(lambda r: outcome.setdefault("result", r),
                       lambda f: outcome.setdefault("failure", f))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=signals)
    if "failure" in outcome:
        outcome["failure"].raiseException()
    return outcome.get("result")
