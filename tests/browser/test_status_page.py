"""The agent's status page in a real browser: headless Chromium (Debian's
`chromium` package) loads it from an agent running on a small testnet of
real nodes after one backup, takes a screenshot, and its DOM shows the
snapshot and the health figures. Skipped, saying so, where Chromium is
missing; CI installs it (.ci/run)."""
import os
import re
import shutil
import struct
import subprocess

import pytest

from tests.integration.agent_helpers import AgentProcess, configure
from tests.integration.conftest import testnet_factory  # noqa: F401 - the fixture
from tests.integration.helpers import init_client, write_random

pytestmark = [pytest.mark.browser, pytest.mark.integration]

BROWSER_TIMEOUT = 90
WIDTH, HEIGHT = 1100, 1400


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium here: `apt-get install chromium` (Debian) to run the "
                "status page's browser test; .ci/run installs it")


def browse(binary, url, profile, *what) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
         f"--window-size={WIDTH},{HEIGHT}", *what, url],
        capture_output=True, text=True, timeout=BROWSER_TIMEOUT, stdin=subprocess.DEVNULL)


def png_size(path) -> tuple:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def test_the_status_page_in_chromium(testnet_factory, tmp_path):  # noqa: F811
    binary = chromium()
    net = testnet_factory(6, "browser-net")
    home = tmp_path / "home"
    init_client(str(home), net, None, "--k", "2", "--n", "4")
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "<notes>.txt").write_text("hello " * 100)
    write_random(data / "photo.raw", 600 * 1024, seed=3)
    configure(home, [data])
    agent = AgentProcess(home)
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

        shot = tmp_path / "status.png"
        proc = browse(binary, agent.url, tmp_path / "profile-1", f"--screenshot={shot}")
        assert shot.exists(), proc.stderr[-2000:]
        assert png_size(shot) == (WIDTH, HEIGHT)
        assert 20_000 < shot.stat().st_size < 5_000_000    # something drawn, not a blank page

        proc = browse(binary, agent.url, tmp_path / "profile-2", "--dump-dom")
        dom = proc.stdout
        assert '<table id="snapshots">' in dom, proc.stderr[-2000:]
        row = re.search(r'<table id="snapshots">.*?</table>', dom, re.S).group(0)
        assert f'<td class="n">{snapshot["id"]}</td>' in row
        assert f'<td class="n">{snapshot["files"]}</td>' in row and snapshot["files"] == 2
        assert f"{healthy} healthy</span>, 0 degraded" in dom
        nodes = re.search(r'<table id="nodes">.*?</table>', dom, re.S).group(0)
        # every holder of a share (which of the 6 nodes hold one depends on placement)
        holders = len(status["health"]["nodes"])
        assert 4 <= holders <= 6 and nodes.count(">yes<") == holders and ">no<" not in nodes
        assert f"{confirmed} shares confirmed" in dom and "0 missing" in dom
        assert "<svg" in dom and "bytes stored" in dom
        keep = os.environ.get("FLUD_SCREENSHOT_DIR")
        if keep:
            shutil.copy(shot, os.path.join(keep, "status.png"))
    finally:
        agent.stop()
