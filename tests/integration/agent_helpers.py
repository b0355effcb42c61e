"""Starting `flud agent` as a real process for the tests, and stopping it
(and the jobs it spawned: its own process group) by pid."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

from tests.integration.helpers import flud_popen, wait_until

AGENT_READY_TIMEOUT = 30.0


class AgentProcess:
    def __init__(self, home, *extra):
        self.home = str(home)
        self.out_path = os.path.join(self.home, "agent-test.out")
        self.err_path = os.path.join(self.home, "agent-test.err")
        self._out = open(self.out_path, "w")
        self._err = open(self.err_path, "w")
        self.popen = flud_popen("agent", "--home", self.home, "--listen", "127.0.0.1:0",
                                *extra, stdout=self._out, stderr=self._err)
        self.url = None

    def output(self) -> str:
        with open(self.out_path) as f, open(self.err_path) as g:
            return f"--- stdout\n{f.read()}\n--- stderr\n{g.read()[-4000:]}"

    def wait_ready(self) -> str:
        def ready():
            assert self.popen.poll() is None, f"the agent exited:\n{self.output()}"
            with open(self.out_path) as f:
                found = re.search(r"status page (http://127\.0\.0\.1:\d+/)", f.read())
            return found and found.group(1)

        self.url = wait_until(ready, AGENT_READY_TIMEOUT, "the agent's status page")
        return self.url

    def status(self) -> dict:
        with urllib.request.urlopen(self.url + "api/status", timeout=10) as answer:
            return json.loads(answer.read())

    def page(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            return answer.read().decode()

    def wait_for_run(self, job: str, timeout: float = 120.0) -> dict:
        def finished():
            for row in self.status()["jobs"]:
                if row["name"] == job and row["last"] is not None:
                    return row["last"]
            return None
        return wait_until(finished, timeout, f"the agent's {job} run", interval=0.2)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to its whole process group (it and its jobs)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # its own session: it and its jobs
        except ProcessLookupError:
            pass
        if self.popen.poll() is None:
            self.popen.wait(10)
        self._out.close()
        self._err.close()


def configure(home, paths, extra: str = "") -> None:
    """Point agent.toml's backup at paths, every hour (it runs at once)."""
    path = os.path.join(str(home), "agent.toml")
    with open(path) as f:
        text = f.read()
    text = text.replace("paths = []", "paths = " + json.dumps([str(p) for p in paths]), 1)
    with open(path, "w") as f:
        f.write(text + extra)


def wait_seconds(predicate, timeout, what):
    started = time.monotonic()
    wait_until(predicate, timeout, what)
    return time.monotonic() - started
