"""Delivering the agent's notifications (Twisted glue over flud/agent/notify.py).

A delivery is blocking network I/O (an HTTP request, apprise's plugins), so
it runs in a small thread pool of its own, never on the reactor thread; each
attempt has a timeout, a failed one is tried again up to `retries` times
after 1, 2, 4 ... s (at most MAX_BACKOFF), scheduled on the reactor's clock.
At most MAX_PENDING deliveries wait at once: past that a new one is dropped
with a warning (a notification storm must not grow memory). Pings use the
standard library's HTTP client (https included, no TLS package needed);
apprise is imported only by a thread that sends to an apprise URL.
"""
import json
import logging
import os
import socket
import urllib.request

from twisted.internet import defer

from flud.agent import notify

log = logging.getLogger("flud.agent.notify")

MAX_PENDING = 64
MAX_BACKOFF = 60.0
MAX_PING_BODY = 10_000      # healthchecks keeps the first 100 kB; a log tail is enough
STATE_NAME = "agent-notify.json"
POOL_THREADS = 2


class DeliveryFailed(Exception):
    pass


def deliver_ping(url: str, body: str, timeout: float) -> int:
    """POST body to url (in a thread); the HTTP status, or DeliveryFailed."""
    data = body.encode("utf-8", "replace")[:MAX_PING_BODY]
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "text/plain; charset=utf-8",
                                              "User-Agent": "flud-agent"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read(1024)
            return answer.status
    except OSError as err:   # URLError, HTTPError, timeouts: all OSErrors
        raise DeliveryFailed(f"{url}: {err}") from None


def deliver_apprise(urls: tuple, title: str, body: str, timeout: float) -> bool:
    """Send through apprise (in a thread); DeliveryFailed when no URL took it."""
    import apprise
    sender = apprise.Apprise()
    for url in urls:
        if not sender.add(url):
            raise DeliveryFailed(f"apprise does not understand the URL {_redact(url)}")
    # apprise's plugins bound their own connects and reads (4 s by default)
    if not sender.notify(title=title, body=body):
        raise DeliveryFailed("apprise could not deliver to any of [notify] urls")
    return True


def unknown_urls(urls) -> list:
    """The positions (1-based) of the apprise URLs apprise does not understand."""
    if not urls:
        return []
    import apprise
    return [i for i, url in enumerate(urls, 1) if not apprise.Apprise().add(url)]


def _redact(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://..." if sep else "..."


class Notifier:
    """Sends notify.Message's to the configured destinations."""

    def __init__(self, reactor, config: notify.NotifyConfig, home: str = None, host: str = None,
                 run_in_thread=None, backup_note: str = None):
        self.reactor = reactor
        self.config = config
        self.host = host or socket.gethostname()
        self.state_path = os.path.join(home, STATE_NAME) if home else None
        self._run_in_thread = run_in_thread
        self._pool = None
        self.pending = 0
        self.dropped = 0
        self.since = reactor.seconds()
        self.backup_note = backup_note   # why backups are not scheduled, or None
        state = self._load_state()
        self.last_notice = state.get("overdue_notice")
        self.safety_notice = state.get("safety_notice")
        self.safety_codes = tuple(state.get("safety_codes") or ())
        self.last_delivery = None   # {what, ok, at, error}: shown on the status page

    # ---- events --------------------------------------------------------------

    def job_started(self, job: str) -> None:
        self.send(notify.start_message(job, self.host), job)

    def job_ended(self, job: str, record: dict, log: str) -> None:
        tail = notify.tail_lines(log, self.config.log_lines)
        self.send(notify.end_message(job, record, tail, self.host), job)

    def check_overdue(self, now: float, records) -> bool:
        """Send the overdue notice if it is due (called on every tick)."""
        last_ok = notify.last_success(records)
        if not notify.overdue_due(now, last_ok, self.since, self.last_notice, self.config):
            return False
        self.last_notice = now
        self._save_state()
        message = notify.overdue_message(now, last_ok, self.since, self.host)
        if self.backup_note:
            message = notify.Message(message.kind, message.title,
                                     f"{message.body}\nThe agent runs no backup: "
                                     f"{self.backup_note}.")
        self.send(message, "backup")
        return True

    def check_safety(self, now: float, verdict) -> bool:
        """Send a safety notice if the verdict has a new red reason (or the
        same ones, overdue_repeat after the last notice)."""
        alarms = notify.safety_alarms(verdict)
        if not alarms:
            if self.safety_codes:   # cleared: the next red reason is news again
                self.safety_codes = ()
                self._save_state()
            return False
        if not notify.safety_due(now, alarms, self.safety_codes, self.safety_notice,
                                 self.config):
            return False
        self.safety_notice, self.safety_codes = now, alarms
        self._save_state()
        self.send(notify.safety_message(verdict, self.host), "backup")
        return True

    def state(self) -> dict:
        """What the status page shows of the notifications."""
        return {"urls": len(self.config.urls), "ping": bool(self.config.ping_url),
                "events": sorted(self.config.events), "pending": self.pending,
                "dropped": self.dropped, "last_delivery": self.last_delivery,
                "overdue_notice": self.last_notice, "safety_notice": self.safety_notice}

    # ---- delivery ------------------------------------------------------------

    def send(self, message: notify.Message, job: str) -> list:
        """Start the deliveries of message; their Deferreds (they never fail)."""
        deliveries = []
        if message.ping is not None and self.config.ping_url:
            url = self.config.ping_url.rstrip("/") + message.ping
            deliveries.append(self._deliver(f"ping {message.kind}", deliver_ping, url,
                                            message.body, self.config.timeout))
        if (self.config.urls and message.kind in self.config.events
                and (message.kind in ("overdue", "safety") or job in self.config.jobs)):
            deliveries.append(self._deliver(f"{message.kind} notice", deliver_apprise,
                                            tuple(self.config.urls), message.title,
                                            message.body, self.config.timeout))
        return deliveries

    def _deliver(self, what: str, function, *args) -> defer.Deferred:
        if self.pending >= MAX_PENDING:
            self.dropped += 1
            log.warning("%s dropped: %d deliveries already waiting", what, self.pending)
            return defer.succeed(False)
        self.pending += 1
        done = defer.Deferred()
        self._attempt(what, function, args, 0, done)
        return done

    def _attempt(self, what, function, args, attempt, done) -> None:
        d = self._in_thread(function, *args)

        def ok(_):
            self.pending -= 1
            self.last_delivery = {"what": what, "ok": True, "at": self.reactor.seconds(),
                                  "error": None}
            done.callback(True)

        def failed(failure):
            if attempt >= self.config.retries:
                self.pending -= 1
                self.last_delivery = {"what": what, "ok": False, "at": self.reactor.seconds(),
                                      "error": failure.getErrorMessage()}
                log.warning("%s not delivered after %d attempts: %s", what, attempt + 1,
                            failure.getErrorMessage())
                done.callback(False)
                return
            delay = min(MAX_BACKOFF, 2.0 ** attempt)
            self.reactor.callLater(delay, self._attempt, what, function, args, attempt + 1,
                                   done)
        d.addCallbacks(ok, failed)

    def _in_thread(self, function, *args) -> defer.Deferred:
        if self._run_in_thread is not None:
            return self._run_in_thread(function, *args)
        if self._pool is None:
            from twisted.python.threadpool import ThreadPool
            self._pool = ThreadPool(0, POOL_THREADS, "flud-notify")
            self._pool.start()
            self.reactor.addSystemEventTrigger("during", "shutdown", self._pool.stop)
        from twisted.internet.threads import deferToThreadPool
        return deferToThreadPool(self.reactor, self._pool, function, *args)

    # ---- the notices' times, kept across restarts -----------------------------------

    def _load_state(self) -> dict:
        if not self.state_path:
            return {}
        try:
            with open(self.state_path) as f:
                state = json.load(f)
            return state if isinstance(state, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_state(self) -> None:
        if not self.state_path:
            return
        temp = self.state_path + ".tmp"
        try:
            with open(temp, "w") as f:
                json.dump({"overdue_notice": self.last_notice,
                           "safety_notice": self.safety_notice,
                           "safety_codes": list(self.safety_codes)}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.state_path)
        except OSError as err:
            log.warning("could not keep the notices' times in %s: %s",
                        self.state_path, err)
