"""Headless Chromium driven over its DevTools protocol (websocket-client):
load a page, run a line of JavaScript in it (a click, a value), read its
DOM, take a screenshot. One browser per Browser(), stopped by pid."""
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

START_TIMEOUT = 30.0
CALL_TIMEOUT = 30.0


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium here: `apt-get install chromium` (Debian) to run the "
                "status page's browser tests; .ci/run installs it")


class Browser:
    def __init__(self, profile, width=1100, height=1400):
        websocket = pytest.importorskip("websocket", reason="the browser tests need "
                                        "websocket-client (pip install -e '.[test]')")
        self.profile = str(profile)
        os.makedirs(self.profile, exist_ok=True)
        self.proc = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            port = self._port()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.loads(r.read()) if t["type"] == "page"]
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"],
                                                  timeout=CALL_TIMEOUT, suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _port(self) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "Chromium exited at start"
            try:
                with open(path) as f:
                    return int(f.readline())
            except (FileNotFoundError, ValueError):
                time.sleep(0.1)
        raise AssertionError("Chromium did not open its DevTools port")

    def call(self, method: str, **params) -> dict:
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def load(self, url: str, timeout: float = 20.0) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'",
                      timeout)

    def wait_for(self, expression: str, timeout: float = 10.0, interval: float = 0.05):
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError:   # a page between two documents
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout} s: {expression}")
            time.sleep(interval)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def screenshot(self, path) -> None:
        data = self.call("Page.captureScreenshot", format="png",
                         captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
