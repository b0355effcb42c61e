"""The status page over HTTP (twisted.web), for this machine only.

GET  /              the page (page.py)
GET  /api/status    the same data as JSON
GET  /browse?snapshot=ID&path=P   one directory of a snapshot (one record
                    at a time: the agent asks `flud ls --dir`)
POST /action/NAME   backup, verify, check (start now), pause (for=1h or
                    tomorrow), resume, restore (snapshot, path, dest)

Every request must name a loopback Host (a page of another site that made
a name of its own point here, DNS rebinding, is refused). A POST must carry
the page's token (a random secret made when the agent starts, in every
form of the page: another site's page cannot read it), and an Origin, when
the browser sends one, must be this page's: otherwise 403 and nothing
happens. A POST answers 303 back to the page (or to the listing it came from).
"""
import datetime
import hmac
import json
import re
import secrets
import urllib.parse

from twisted.web import resource, server

from flud.agent import page

LOOPBACK_HOST = re.compile(rb"(localhost|127(\.\d{1,3}){3}|\[::1\]|::1)(:\d+)?")
MAX_FORM = 16 * 1024   # bytes of a POST body read at most
PAUSES = {"1h": 3600.0}


def tomorrow_morning(now: float, tz=None, hour: int = 6) -> float:
    """06:00 of the calendar day after `now` (local time unless tz)."""
    moment = datetime.datetime.fromtimestamp(now, tz)
    day = (moment + datetime.timedelta(days=1)).date()
    return datetime.datetime.combine(day, datetime.time(hour, 0), moment.tzinfo).timestamp()


class StatusPage(resource.Resource):
    isLeaf = True

    def __init__(self, status_source, agent=None, token: str = None):
        """status_source(): the status dict (flud.agent.status.build_status);
        agent: what the actions and the browser call (service.Agent), or None
        for a page without actions."""
        super().__init__()
        self.status_source = status_source
        self.agent = agent
        self.token = token or secrets.token_urlsafe(32)

    # ---- the checks every request passes ----------------------------------

    def _host(self, request):
        host = request.getHeader(b"host")
        host = host.encode() if isinstance(host, str) else host
        return host if host is not None and LOOPBACK_HOST.fullmatch(host) else None

    def _refuse(self, request, code: int, text: str) -> bytes:
        request.setResponseCode(code)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return (text + "\n").encode()

    def _headers(self, request) -> None:
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"x-frame-options", b"DENY")
        # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null"
        # on the page's own forms, and the origin check would refuse them
        request.setHeader(b"referrer-policy", b"same-origin")

    # ---- GET -----------------------------------------------------------------

    def render_GET(self, request):
        if self._host(request) is None:
            return self._refuse(request, 403, "the status page answers requests for "
                                              "127.0.0.1 or localhost only")
        path = request.path.rstrip(b"/") or b"/"
        self._headers(request)
        if path == b"/api/status":
            request.setHeader(b"content-type", b"application/json")
            return json.dumps(self.status_source(), default=str).encode()
        if path == b"/":
            return self._html(request, page.render(self.status_source(), self._token()))
        if path == b"/browse" and self.agent is not None:
            return self._browse(request)
        return self._refuse(request, 404, "not found: the page is / and its data /api/status")

    def _token(self):
        return self.token if self.agent is not None else None

    def _html(self, request, text: str) -> bytes:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"content-security-policy",
                          b"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                          b"form-action 'self'; frame-ancestors 'none'")
        return text.encode()

    def _browse(self, request):
        try:
            snapshot = int(_arg(request, "snapshot"))
        except (TypeError, ValueError):
            return self._refuse(request, 400, "browse: ?snapshot=ID (a number) is needed")
        path = (_arg(request, "path") or "").strip("/")
        d = self.agent.browse(snapshot, path)

        def done(listing):
            text = page.render_browse(self.status_source(), snapshot, path, listing,
                                      self.token)
            request.write(self._html(request, text))
            request.finish()

        def failed(failure):
            request.write(self._refuse(request, 500, f"browse failed: "
                                                     f"{failure.getErrorMessage()}"))
            request.finish()
        d.addCallbacks(done, failed)
        return server.NOT_DONE_YET

    # ---- POST ----------------------------------------------------------------

    def render_POST(self, request):
        host = self._host(request)
        if host is None:
            return self._refuse(request, 403, "the status page answers requests for "
                                              "127.0.0.1 or localhost only")
        origin = request.getHeader(b"origin")
        origin = origin.encode() if isinstance(origin, str) else origin
        if origin is not None and origin != b"http://" + host:
            return self._refuse(request, 403, f"forbidden: a request from another site "
                                              f"({origin.decode('ascii', 'replace')}) cannot act on "
                                              f"this page")
        request.content.seek(0)
        form = urllib.parse.parse_qs(request.content.read(MAX_FORM).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0]
        if self.agent is None or not hmac.compare_digest(token.encode(), self.token.encode()):
            return self._refuse(request, 403, "forbidden: this form does not carry the page's "
                                              "token; reload the page and try again")
        self._headers(request)
        action = request.path.decode("ascii", "replace").removeprefix("/action/")
        value = lambda key: (form.get(key) or [""])[0]  # noqa: E731
        back = "/"
        try:
            if action in ("backup", "verify", "check"):
                self.agent.ask(action)
            elif action == "pause":
                now = self.agent.reactor.seconds()
                until = (tomorrow_morning(now, self.agent.tz) if value("for") == "tomorrow"
                         else now + PAUSES.get(value("for"), 3600.0))
                self.agent.pause(until)
            elif action == "resume":
                self.agent.pause(None)
            elif action == "restore":
                self.agent.ask_restore(int(value("snapshot")), value("path"), value("dest"))
            else:
                return self._refuse(request, 404, f"no action {action!r}")
        except ValueError as err:
            return self._refuse(request, 400, f"{action}: {err}")
        request.setResponseCode(303)
        request.setHeader(b"location", back.encode())
        request.setHeader(b"content-type", b"text/plain")
        return b"done\n"


def _arg(request, name: str):
    values = request.args.get(name.encode())
    return values[0].decode("utf-8", "surrogateescape") if values else None
