"""`flud agent`: the long-running client in the foreground. It reads
agent.toml, holds the home's agent lock for its life, runs the scheduled
jobs and serves the status page on a loopback address."""
import sys

from flud.cli.exits import EXIT_ERROR, EXIT_OK


def add_agent_command(sub) -> None:
    from flud.cli.client import _rate

    agent = sub.add_parser("agent", help="run scheduled backups and checks, serve a status page")
    agent.add_argument("--home", required=True)
    agent.add_argument("--listen", metavar="HOST:PORT",
                       help="where the status page listens, loopback only "
                            "(default: agent.toml's [agent] listen, 127.0.0.1:8786)")
    agent.add_argument("--limit-upload", type=_rate, default=None, metavar="RATE",
                       help="every job's upload limit: KiB/s, or 500K, 10M (default: agent.toml)")
    agent.add_argument("--limit-download", type=_rate, default=None, metavar="RATE",
                       help="every job's download limit (default: agent.toml)")
    agent.add_argument("--test-notifications", action="store_true",
                       help="send a test notice to every [notify] destination (the ping "
                            "URL's /log, which changes no check's state), say how each "
                            "went, and exit")
    agent.set_defaults(handler=cmd_agent)


def cmd_agent(args) -> int:
    import dataclasses
    import logging

    from flud.agent.config import ConfigError, load, parse_listen
    from flud.agent.lock import AGENT_LOCK, HomeBusy, HomeLock
    from flud.cli.home import open_home

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    home = open_home(args.home)
    if home is None:
        return EXIT_ERROR
    path = home.path
    home.close()
    try:
        config = load(path)
        changes = {}
        if args.listen:
            try:
                changes["listen"] = parse_listen(args.listen)
            except ValueError as err:
                raise ConfigError(f"--listen: {err}") from None
        if args.limit_upload is not None:
            changes["upload"] = args.limit_upload
        if args.limit_download is not None:
            changes["download"] = args.limit_download
        config = dataclasses.replace(config, **changes)
        from flud.agent.notifier import unknown_urls
        wrong = unknown_urls(config.notify.urls)
        if wrong:
            raise ConfigError(f"{config.path}: [notify] urls: apprise does not understand "
                              f"entry {wrong[0]} (see https://github.com/caronc/apprise/wiki "
                              f"for the URL of each service)")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.test_notifications:
        from flud.cli.notify_test import test_notifications
        return test_notifications(config)
    lock = HomeLock(path, AGENT_LOCK)
    try:
        lock.acquire(busy_message=f"an agent is already running on {path}")
    except HomeBusy as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    from flud.cli.runner import run_reactor
    try:
        return run_reactor(lambda reactor: _serve(reactor, path, config), signals=True)
    finally:
        lock.release()


def _extras(config) -> list:
    """What agent.toml adds around the jobs, one line each (none if nothing)."""
    lines = []
    notify = config.notify
    if notify.any:
        where = ([f"ping {notify.ping_url}"] if notify.ping_url else []) + \
            ([f"{len(notify.urls)} apprise URL(s) ({', '.join(sorted(notify.events))})"]
             if notify.urls else [])
        lines.append("notifications: " + "; ".join(where))
    if config.hooks:
        lines.append("hooks: " + ", ".join(sorted(config.hooks)))
    if config.bandwidth:
        lines.append(f"bandwidth: {len(config.bandwidth)} window(s) by time of day")
    if config.pause_on_battery:
        lines.append("no job starts on battery")
    return lines


def _serve(reactor, home, config):
    import signal

    from twisted.internet import defer
    from twisted.internet.error import CannotListenError
    from twisted.web.server import Site

    from flud.agent.history import History
    from flud.agent.service import Agent
    from flud.agent.web import StatusPage

    agent = Agent(reactor, home, config, History(home, config.history))
    host, port = config.listen
    try:
        listening = reactor.listenTCP(port, Site(StatusPage(agent.status, agent)), interface=host)
    except CannotListenError as err:
        print(f"error: the status page cannot listen on {host}:{port} ({err.socketError}); "
              f"choose another with --listen or [agent] listen", file=sys.stderr)
        return defer.succeed(EXIT_ERROR)
    bound = listening.getHost()
    shown = f"[{bound.host}]" if ":" in bound.host else bound.host
    print(f"flud agent on {home}: status page http://{shown}:{bound.port}/", flush=True)
    for name, why in agent.states.items():
        print(f"  {name}: {'scheduled' if why is None else why}", flush=True)
    for line in _extras(config):
        print(f"  {line}", flush=True)
    done = defer.Deferred()

    def stop(signum, _frame):
        reactor.callFromThread(finish, signum)

    def finish(signum):
        if done.called:
            return
        agent.stop()
        if agent.running:
            print(f"stopping without waiting for the {agent.running['job']} job "
                  f"(pid {agent.running['pid']}): it holds the home's job lock until "
                  f"it ends", file=sys.stderr, flush=True)
        listening.stopListening()
        done.callback(EXIT_OK)

    # over Twisted's own (which stop the reactor at once), after it set them
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.start()
    return done
