"""The status data and page: pure functions of the agent's state."""
import json

from flud.agent.page import plot, render
from flud.agent.status import build_status, health_of, series

# the shape of CheckReport.summary() (flud/client/repair/check_job.py)
CHECK = {"command": "check", "exit": 0,
         "counts": {"healthy": 40, "degraded": 3, "at_risk": 2, "unavailable": 4,
                    "lost": 1, "repaired": 5},
         "recreated": {"shares": 5, "bytes": 5 * 1024 * 1024},
         "nodes": [{"node": "cd" * 32, "reachable": False, "unreachable_since": 1.0,
                    "shares": 7, "ok": 0, "corrupt": 0, "missing": 0, "surplus": 0},
                   {"node": "ab" * 32, "reachable": True, "unreachable_since": None,
                    "shares": 9, "ok": 8, "corrupt": 1, "missing": 0, "surplus": 0}]}


def status(records, snapshots=()):
    return build_status(1000.0, "/h", {"backup": (3600.0, None)},
                        {"backup": None, "check": "`flud check` is not in this version yet"},
                        {"backup": 4600.0}, records, list(snapshots), None)


def test_no_check_yet_until_a_check_ran():
    s = status([{"job": "backup", "start": 1, "end": 2, "exit": 0,
                 "summary": {"snapshot": 1, "files": 3, "bytes_sent": 10}}])
    assert s["health"] is None
    page = render(s)
    assert "no check yet" in page and "snapshot 1: 3 files" in page


def test_health_and_nodes_from_the_last_check():
    records = [{"job": "check", "start": 5, "end": 6, "exit": 0, "summary": CHECK}]
    s = status(records)
    assert s["health"]["objects"] == {"healthy": 40, "degraded": 3, "at_risk": 2,
                                      "unavailable": 4, "lost": 1}
    assert s["repaired"] == 5
    page = render(s)
    assert "40 healthy" in page and "3 degraded" in page and "1 lost" in page
    assert "2 at risk" in page and "4 unavailable" in page
    assert "repairs done: 5 (5.0 MiB re-created" in page and ">no<" in page
    nodes = page.split('<table id="nodes">')[1].split("</table>")[0]
    assert nodes.index("abababab") < nodes.index("cdcdcdcd")   # sorted by node
    assert '<td class="n">9</td><td class="n">8</td><td class="n">1</td>' in nodes
    assert [n["shares"] for n in s["health"]["nodes"]] == [9, 7]
    assert "bytes stored</th>" not in nodes   # this check reports shares, not bytes
    sized = {**CHECK, "nodes": [{**CHECK["nodes"][0], "bytes": 3 * 1024 * 1024}]}
    page = render(status([{"job": "check", "start": 5, "end": 6, "exit": 0, "summary": sized}]))
    assert "bytes stored</th>" in page and "3.0 MiB" in page
    json.dumps(s)   # /api/status serves it as it is


def test_names_from_files_are_escaped():
    evil = '<script>alert(1)</script>'
    s = status([{"job": "backup", "start": 1, "end": 2, "exit": 2,
                 "summary": {"error": {"code": "X", "message": f"cannot read /d/{evil}"}}}],
               [{"id": 1, "created": 1, "files": evil, "bytes": 1}])
    page = render(s)
    assert evil not in page and "&lt;script&gt;" in page


def test_series_and_their_plot():
    records = [{"job": "backup", "start": t, "end": t + 1, "exit": 0,
                "summary": {"bytes_sent": 100}} for t in (10, 20, 30)]
    records.append({"job": "check", "start": 40, "end": 41, "exit": 0, "summary": CHECK})
    found = series(records)
    assert found["stored_bytes"] == [[11, 100], [21, 200], [31, 300]]
    assert found["health"] == [[41, 40, 3, 2, 4, 1]]
    svg = plot(found["stored_bytes"], ["bytes stored"], "bytes stored")
    assert svg.startswith("<figure><svg") and svg.count("<polyline") == 1
    assert svg.count("<circle") == 3 and ">300</text>" in svg   # dots, the last value
    assert "no data yet" in plot([], ["x"], "x")
    assert health_of({"no": "counts"}) is None
    assert status(records)["log"][0]["line"] == (
        "40 healthy, 3 degraded, 2 at risk, 4 unavailable, 1 lost, 5 repaired")
    # A check that found objects unreadable exits 2 with an error: its
    # counts are the series' most important point, not a failed run's noise.
    worst = {**CHECK, "exit": 2, "error": {"code": "OBJECTS_UNREADABLE"}}
    records.append({"job": "check", "start": 50, "end": 51, "exit": 2, "summary": worst})
    assert series(records)["health"][-1] == [51, 40, 3, 2, 4, 1]


def test_the_web_resource_serves_the_page_and_the_json_to_loopback_names_only():
    from twisted.web.test.requesthelper import DummyRequest

    from flud.agent.web import StatusPage

    data = status([])
    page = StatusPage(lambda: data)

    def get(path, host):
        request = DummyRequest([])
        request.path = path
        if host is not None:
            request.requestHeaders.setRawHeaders(b"host", [host])
        body = page.render_GET(request)
        return request.responseCode or 200, body

    code, body = get(b"/api/status", b"127.0.0.1:8786")
    assert code == 200 and json.loads(body)["home"] == "/h"
    code, body = get(b"/", b"localhost:8786")
    assert code == 200 and b"<h1>flud agent</h1>" in body
    assert get(b"/", b"evil.example:8786")[0] == 403     # a rebound name
    assert get(b"/", None)[0] == 403
    assert get(b"/nothing", b"[::1]:8786")[0] == 404


def test_the_last_verify_is_shown_per_node():
    summary = {"totals": {"confirmed": 3, "missing": 1, "corrupt": 0, "unreachable": 0},
               "nodes": {"aa" * 32: {"confirmed": 3, "missing": 0, "corrupt": 0, "unreachable": 0},
                         "bb" * 32: {"confirmed": 0, "missing": 1, "corrupt": 0, "unreachable": 0}}}
    page = render(status([{"job": "verify", "start": 1, "end": 2, "exit": 1, "summary": summary}]))
    table = page.split('<table id="verify-nodes">')[1].split("</table>")[0]
    assert table.count("<tr") == 3 and "aaaaaaaaaaaaaaaa" in table
    assert '<tr class=bad><td><code>bbbbbbbbbbbbbbbb' in table
    assert "3 shares confirmed" in page and "1 missing" in page


def test_the_date_the_nodes_keep_the_data_until_is_shown():
    assert status([])["leases"] is None
    assert "leases not renewed yet" in render(status([]))
    day = 86400.0
    renewed = 1_800_000_000.0
    records = [
        {"job": "backup", "start": 1, "end": 2, "exit": 0,
         "summary": {"snapshot": 1, "leases": {"renewed": renewed - 7 * day,
                                              "lease_seconds": 365 * day,
                                              "kept_until": renewed + 358 * day}}},
        # a job that failed after its renewal still reports it
        {"job": "check", "start": 3, "end": 4, "exit": 2,
         "summary": {"error": {"code": "X", "message": "no"},
                     "leases": {"renewed": renewed, "lease_seconds": 365 * day,
                                "kept_until": renewed + 365 * day}}},
        {"job": "verify", "start": 5, "end": 6, "exit": 0, "summary": {"totals": {}}},
    ]
    s = status(records)
    assert s["leases"]["kept_until"] == renewed + 365 * day
    page = render(s)
    section = page.split('<p id="leases">')[1].split("</p>")[0]
    from time import localtime, strftime
    assert strftime("%Y-%m-%d", localtime(renewed + 365 * day)) in section
    json.dumps(s)
