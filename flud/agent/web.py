"""The status page over HTTP (twisted.web): / is the page, /api/status the
same data as JSON. Read-only: GET only."""
import json
import re

from twisted.web import resource

from flud.agent.page import render

# The page is for this machine: a request whose Host is not a loopback name
# came through a name that was made to point here (DNS rebinding), from a
# page of some other site. It is refused.
LOOPBACK_HOST = re.compile(rb"(localhost|127(\.\d{1,3}){3}|\[::1\]|::1)(:\d+)?")


class StatusPage(resource.Resource):
    isLeaf = True

    def __init__(self, status_source):
        """status_source(): the status dict (flud.agent.status.build_status)."""
        super().__init__()
        self.status_source = status_source

    def render_GET(self, request):
        host = request.getHeader(b"host")
        if host is None or not LOOPBACK_HOST.fullmatch(host.encode() if isinstance(host, str)
                                                        else host):
            request.setResponseCode(403)
            request.setHeader(b"content-type", b"text/plain")
            return b"the status page answers requests for 127.0.0.1 or localhost only\n"
        path = request.path.rstrip(b"/") or b"/"
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-content-type-options", b"nosniff")
        if path == b"/api/status":
            request.setHeader(b"content-type", b"application/json")
            return json.dumps(self.status_source(), default=str).encode()
        if path == b"/":
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            request.setHeader(b"content-security-policy",
                              b"default-src 'none'; style-src 'unsafe-inline'; img-src data:")
            return render(self.status_source()).encode()
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/plain")
        return b"not found: the page is / and its data /api/status\n"
