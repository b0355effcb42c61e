"""The status page over HTTP (twisted.web): / is the page, /api/status the
same data as JSON. Read-only: GET only."""
import json

from twisted.web import resource

from flud.agent.page import render


class StatusPage(resource.Resource):
    isLeaf = True

    def __init__(self, status_source):
        """status_source(): the status dict (flud.agent.status.build_status)."""
        super().__init__()
        self.status_source = status_source

    def render_GET(self, request):
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
