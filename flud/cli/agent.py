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
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
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
