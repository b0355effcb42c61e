"""`flud agent --test-notifications`: one test notice to each [notify]
destination, in this process (no reactor, no agent), each outcome said."""
import socket
import sys

from flud.cli.exits import EXIT_ERROR, EXIT_OK


def test_notifications(config) -> int:
    from flud.agent.notifier import DeliveryFailed, deliver_apprise, deliver_ping
    notify = config.notify
    if not notify.any:
        print(f"error: {config.path} has no [notify] urls and no ping_url: nothing to test",
              file=sys.stderr)
        return EXIT_ERROR
    host = socket.gethostname()
    title = f"flud on {host}: test notification"
    body = "If you read this, flud's agent can reach you."
    failed = 0
    targets = []
    if notify.ping_url:   # healthchecks' /log records an event, changes no state
        targets.append((f"ping {notify.ping_url.rstrip('/')}/log", deliver_ping,
                        (notify.ping_url.rstrip("/") + "/log", body, notify.timeout)))
    if notify.urls:
        targets.append((f"apprise ({len(notify.urls)} URL(s))", deliver_apprise,
                        (tuple(notify.urls), title, body, notify.timeout)))
    for what, function, args in targets:
        try:
            function(*args)
        except (DeliveryFailed, OSError) as err:
            failed += 1
            print(f"{what}: FAILED: {err}")
        else:
            print(f"{what}: sent")
    return EXIT_ERROR if failed else EXIT_OK
