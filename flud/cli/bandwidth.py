"""A job that follows the agent's [[bandwidth]] windows while it runs: the
agent passes them with --limit-schedule, and every CHECK_EVERY seconds the
job sets its rate limits to those of the moment (a night backup that runs
into the morning slows down at 08:00, not at its end)."""
import datetime

from flud.agent.bandwidth import limits_at, schedule_from_json

CHECK_EVERY = 30.0


class _Stopped:
    def stop(self):
        pass


def follow_schedule(reactor, network, text, tz=None):
    """Start following the schedule (None or '': nothing to follow); returns
    something to stop() when the job ends."""
    if not text:
        return _Stopped()
    from twisted.internet import task
    windows, upload, download = schedule_from_json(text)

    def apply():
        moment = datetime.datetime.fromtimestamp(reactor.seconds(), tz)
        network.set_limits(*limits_at(windows, upload, download, moment))

    loop = task.LoopingCall(apply)
    loop.clock = reactor
    loop.start(CHECK_EVERY, now=True)
    return loop
