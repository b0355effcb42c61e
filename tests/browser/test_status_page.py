"""The agent's status page in a real browser: headless Chromium (Debian's
`chromium` package) loads it from an agent running on a small testnet of
real nodes after one backup: the headline says the data is safe, the DOM
shows the snapshot and the health figures; a click on "back up now" shows
the backup running within 2 s; a file restored through the snapshot browser
has the bytes of the original; a form on another origin that POSTs without
the token gets 403 and starts nothing. Skipped, saying so, where Chromium is
missing; CI installs it (.ci/run). FLUD_SCREENSHOT_DIR=DIR keeps the
screenshots."""
import contextlib
import http.server
import json
import os
import re
import shutil
import struct
import threading
import time

import pytest

from tests.integration.agent_helpers import AgentProcess, configure
from tests.integration.conftest import testnet_factory  # noqa: F401 - the fixture
from tests.browser.cdp import Browser, chromium
from tests.integration.helpers import init_client, wait_until, write_random

pytestmark = [pytest.mark.browser, pytest.mark.integration]

WIDTH, HEIGHT = 1100, 1400


def png_size(path) -> tuple:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def test_the_status_page_in_chromium(testnet_factory, tmp_path):  # noqa: F811
    chromium()   # or skip, saying why
    net = testnet_factory(6, "browser-net")
    home = tmp_path / "home"
    init_client(str(home), net, None, "--k", "2", "--n", "4")
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    notes = data / "docs" / "<notes>.txt"
    notes.write_text("hello " * 100)
    write_random(data / "photo.raw", 600 * 1024, seed=3)
    configure(home, [data])
    # uploads at 1 MiB/s: a backup of a new 1.5 MiB file runs for a few seconds
    agent = AgentProcess(home, "--limit-upload", "1M")
    browser = None
    keep = os.environ.get("FLUD_SCREENSHOT_DIR")
    try:
        agent.wait_ready()
        assert agent.wait_for_run("backup")["exit"] == 0, agent.output()
        assert agent.wait_for_run("verify")["exit"] == 0, agent.output()
        assert agent.wait_for_run("check")["exit"] == 0, agent.output()
        status = agent.status()
        healthy = status["health"]["objects"]["healthy"]
        assert healthy > 0
        (snapshot,) = status["snapshots"]
        confirmed = status["verify"]["totals"]["confirmed"]
        assert confirmed > 0

        browser = Browser(tmp_path / "profile-2", WIDTH, HEIGHT)
        browser.load(agent.url)
        shot = tmp_path / "status.png"
        browser.screenshot(shot)
        width, height = png_size(shot)
        assert width == WIDTH and height >= HEIGHT
        assert 20_000 < shot.stat().st_size < 5_000_000    # something drawn, not a blank page
        dom = browser.evaluate("document.documentElement.outerHTML")
        assert browser.evaluate("document.getElementById('verdict').dataset.level") == "ok"
        headline = browser.evaluate("document.getElementById('headline').innerText")
        assert headline.startswith("Your data is safe: last backup ") and \
            f"all {healthy} objects at full redundancy; nodes keep the data until 20" in headline
        assert '<table id="snapshots">' in dom
        row = re.search(r'<table id="snapshots">.*?</table>', dom, re.S).group(0)
        assert f'<td class="n">{snapshot["id"]}</td>' in row
        assert f'<td class="n">{snapshot["files"]}</td>' in row and snapshot["files"] == 2
        assert f"{healthy} healthy</span>, 0 degraded" in dom
        nodes = re.search(r'<table id="nodes">.*?</table>', dom, re.S).group(0)
        # every holder of a share (which of the 6 nodes hold one depends on placement)
        holders = len(status["health"]["nodes"])
        assert 4 <= holders <= 6 and nodes.count(">yes<") == holders and ">no<" not in nodes
        assert f"{confirmed} shares confirmed" in dom and "0 missing" in dom
        assert "<svg" in dom and "bytes stored" in dom and "no data yet" not in dom
        if keep:
            shutil.copy(shot, os.path.join(keep, "real-all-safe.png"))

        # "back up now": the page shows the backup running within 2 s of the click
        write_random(data / "new.raw", 1536 * 1024, seed=4)
        clicked = time.monotonic()
        browser.evaluate("document.getElementById('backup-now').click()")
        browser.wait_for("(document.getElementById('running') || {innerText: ''})"
                         ".innerText.startsWith('backup running')", timeout=2.0)
        assert time.monotonic() - clicked < 2.0
        if keep:
            browser.screenshot(os.path.join(keep, "real-job-running.png"))
        wait_until(lambda: len(agent.status()["snapshots"]) == 2 and
                   agent.status()["running"] is None, 60, "the backup asked for")

        # restore one file through the snapshot browser, to a folder
        dest = tmp_path / "restored"
        browser.load(agent.url + "browse?snapshot=1&path=data/docs")
        try:
            browser.wait_for("!!document.getElementById('entries')", timeout=30)
        except AssertionError:
            raise AssertionError(f"no listing: {browser.text()[-2000:]}\n{agent.output()}")
        assert "<notes>.txt" in browser.text()
        if keep:
            browser.screenshot(os.path.join(keep, "real-browse.png"))
        browser.evaluate(f"""(() => {{
            document.querySelector('#restore input[name=dest]').value = {json.dumps(str(dest))};
            for (const button of document.querySelectorAll('button.restore')) {{
                if (button.value.endsWith('<notes>.txt')) {{ button.click(); return true; }}
            }}
            throw new Error('no restore button for the file');
        }})()""")
        restored = dest / "data" / "docs" / "<notes>.txt"
        wait_until(lambda: any(r["job"] == "restore" for r in agent.status()["log"]), 60,
                   "the restore asked for on the page")
        (run,) = [r for r in agent.status()["log"] if r["job"] == "restore"]
        assert run["exit"] == 0, (run, agent.output())
        assert restored.read_bytes() == notes.read_bytes()

        # a page of another origin POSTs to the agent without the token: 403, nothing runs
        runs = len(agent.status()["log"])
        with other_site(agent.url + "action/backup") as evil:
            browser.load(evil)
            browser.wait_for("location.href.endsWith('/action/backup') && "
                             "document.body && document.body.innerText.includes('forbidden')",
                             timeout=10)
        assert browser.evaluate("performance.getEntriesByType('navigation')[0]"
                                ".responseStatus") == 403
        time.sleep(0.5)
        assert agent.status()["running"] is None and len(agent.status()["log"]) == runs
    finally:
        if browser is not None:
            browser.close()
        agent.stop()


@contextlib.contextmanager
def other_site(target):
    """A page on another origin (another port) whose form POSTs to target."""
    body = (f'<!DOCTYPE html><form id="f" method="post" action="{target}">'
            f'<input name="x" value="1"></form>'
            f'<script>document.getElementById("f").submit()</script>').encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
