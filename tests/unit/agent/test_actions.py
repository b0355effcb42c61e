"""The page's actions: POSTs with the page's token start a job at once,
pause and resume the schedule, restore a path; a POST without the token, or
from another origin, is refused with 403 and changes nothing."""
import io

from twisted.web.test.requesthelper import DummyRequest

from flud.agent.web import StatusPage, tomorrow_morning
from tests.unit.agent.test_service import make

TOKEN = "t0ken-of-the-page"


def post(page, path, form, host=b"127.0.0.1:8786", origin=None):
    request = DummyRequest([])
    request.method = b"POST"
    request.path = path
    request.requestHeaders.setRawHeaders(b"host", [host])
    if origin is not None:
        request.requestHeaders.setRawHeaders(b"origin", [origin])
    request.content = io.BytesIO("&".join(f"{k}={v}" for k, v in form.items()).encode())
    body = page.render_POST(request)
    return request.responseCode or 200, body, request


def test_back_up_now_starts_the_backup_at_once(tmp_path):
    agent, clock, spawn = make(tmp_path)
    agent.start()
    spawn.finish({"snapshot": 1, "files": 1, "bytes_sent": 5})   # the first, scheduled run
    clock.advance(0)
    spawn.finish({"totals": {}})                                  # verify
    clock.advance(0)
    assert agent.status()["running"] is None
    page = StatusPage(agent.status, agent, token=TOKEN)
    code, _, request = post(page, b"/action/backup", {"token": TOKEN})
    assert code == 303 and request.responseHeaders.getRawHeaders(b"location") == [b"/"]
    clock.advance(0)
    assert agent.status()["running"]["job"] == "backup"
    assert spawn.calls[-1][0][3] == "backup"


def test_without_the_token_or_from_another_origin_nothing_happens(tmp_path):
    agent, clock, spawn = make(tmp_path)
    page = StatusPage(agent.status, agent, token=TOKEN)
    for form, origin in (({}, None), ({"token": "guess"}, None),
                         ({"token": TOKEN}, b"http://evil.example"),
                         ({"token": TOKEN}, b"http://127.0.0.1:9999")):
        code, body, _ = post(page, b"/action/backup", form, origin=origin)
        assert code == 403 and b"forbidden" in body
    assert post(page, b"/action/backup", {"token": TOKEN}, host=b"evil.example")[0] == 403
    assert agent.scheduler.requested == []
    # the same origin is fine
    assert post(page, b"/action/backup", {"token": TOKEN},
                origin=b"http://127.0.0.1:8786")[0] == 303
    assert agent.scheduler.requested == ["backup"]


def test_pause_holds_the_schedule_and_survives_a_restart(tmp_path):
    agent, clock, spawn = make(tmp_path)
    page = StatusPage(agent.status, agent, token=TOKEN)
    assert post(page, b"/action/pause", {"token": TOKEN, "for": "1h"})[0] == 303
    now = clock.seconds()
    assert agent.status()["paused_until"] == now + 3600
    agent.start()
    assert spawn.calls == []                       # the backup due now waits
    again, _, _ = make(tmp_path, clock=clock)      # a restarted agent keeps the pause
    assert again.scheduler.paused_until == now + 3600
    assert post(page, b"/action/resume", {"token": TOKEN})[0] == 303
    clock.advance(0)
    assert [c[0][3] for c in spawn.calls] == ["backup"]
    assert tomorrow_morning(now) > now


def test_restore_through_the_page_runs_flud_restore(tmp_path):
    agent, clock, spawn = make(tmp_path)
    page = StatusPage(agent.status, agent, token=TOKEN)
    agent.pause(clock.seconds() + 3600)
    agent.start()
    code, _, _ = post(page, b"/action/restore", {"token": TOKEN, "snapshot": "3",
                                                 "path": "docs/a.txt", "dest": "/tmp/out"})
    assert code == 303
    clock.advance(0)
    argv = spawn.calls[-1][0]
    assert argv[3:10] == ["restore", "docs/a.txt", "--snapshot", "3", "--to", "/tmp/out",
                          "--home"]
    assert post(page, b"/action/restore", {"token": TOKEN, "snapshot": "3", "path": "x",
                                           "dest": "relative"})[0] == 400


def test_the_running_job_shows_its_progress_from_its_status_lines(tmp_path):
    from flud.agent.page import render

    agent, clock, spawn = make(tmp_path)
    agent.start()
    on_line = spawn.on_line
    on_line({"type": "status", "phase": "backup", "files_done": 3, "total_files": 12,
             "bytes_done": 512, "total_bytes": 2048, "percent_done": 25.0,
             "seconds_remaining": 9.0})
    on_line({"type": "summary", "exit": 0})   # not a status line: ignored
    running = agent.status()["running"]
    assert running["progress"]["percent_done"] == 25.0 and running["progress"]["files_done"] == 3
    page = render(agent.status(), TOKEN)
    assert "25%" in page and "3/12 files" in page and "about 9 s left" in page
    assert "Backup running</button>" in page and 'id=backup-now disabled' in page


def test_a_restore_asked_for_while_the_home_is_busy_runs_later(tmp_path):
    from flud.agent.service import BUSY_RETRY

    agent, clock, spawn = make(tmp_path)
    agent.pause(clock.seconds() + 10 * BUSY_RETRY)   # no scheduled job in the way
    agent.start()
    agent.ask_restore(3, "docs/a.txt", "/tmp/out")
    clock.advance(0)
    assert spawn.calls[-1][0][3] == "restore"
    spawn.finish({"error": {"code": "HOME_BUSY", "message": "another job is running"}},
                 exit=2)
    clock.advance(0)
    assert len(spawn.calls) == 1 and agent.status()["running"] is None
    clock.advance(BUSY_RETRY)
    assert len(spawn.calls) == 2
    assert spawn.calls[-1][0][3:7] == ["restore", "docs/a.txt", "--snapshot", "3"]
