"""Screenshots of the status page in each state a person meets: all safe,
degraded, backup overdue, job running. The page is rendered from a made-up
history of two weeks (daily backups and checks) by the agent's own code
(status.build_status, page.render), written to HTML files and shot by
headless Chromium.

    python tools/page_screens.py OUT_DIR

The browser test (tests/browser) shoots the page of a real agent on a real
testnet (FLUD_SCREENSHOT_DIR=DIR): all safe, a backup running, the browser.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flud.agent.page import render  # noqa: E402
from flud.agent.status import build_status  # noqa: E402

DAY = 86400.0
NODES = [f"{i:x}" * 64 for i in (1, 2, 3, 4, 5, 6)]
WIDTH, HEIGHT = 1100, 2400


def check_summary(objects, reachable=6, repaired=0):
    nodes = [{"node": node[:64], "reachable": i < reachable, "shares": 40 + 3 * i,
              "ok": 40 + 3 * i if i < reachable else 0, "corrupt": 0,
              "missing": 0, "bytes": (310 + 20 * i) * 1024 * 1024}
             for i, node in enumerate(NODES)]
    counts = {"healthy": objects[0], "degraded": objects[1], "at_risk": objects[2],
              "unavailable": objects[3], "lost": objects[4], "repaired": repaired}
    return {"counts": counts, "nodes": nodes, "recreated": {"shares": repaired,
                                                            "bytes": repaired * 2 ** 21}}


def history(now, days=14, last_backup_age=0.3 * DAY, degraded_from=None, failures=0):
    records, sent = [], 0
    start = now - days * DAY
    lease = {"renewed": now - 0.2 * DAY, "lease_seconds": 365 * DAY,
             "kept_until": now - 0.2 * DAY + 365 * DAY}
    for day in range(days):
        t = start + day * DAY
        if t <= now - last_backup_age:
            sent += (2000 if day == 0 else 6) * 1024 * 1024
            records.append({"job": "backup", "start": t, "end": t + 95, "exit": 0,
                            "summary": {"snapshot": day + 1, "files": 4210 + 13 * day,
                                        "bytes_sent": sent if day == 0 else 6 * 2 ** 20,
                                        "leases": lease}})
        healthy, degraded = 1800 + 10 * day, 0
        if degraded_from is not None and day >= degraded_from:
            degraded = 35 + 12 * (day - degraded_from)
            healthy -= degraded
        records.append({"job": "check", "start": t + 3600, "end": t + 3700, "exit": 0,
                        "summary": {**check_summary(
                            (healthy, degraded, 0, 0, 0),
                            reachable=5 if degraded else 6), "leases": lease}})
        records.append({"job": "verify", "start": t + 7200, "end": t + 7260, "exit": 0,
                        "summary": {"totals": {"confirmed": 240, "missing": 0, "corrupt": 0,
                                               "unreachable": 0},
                                    "nodes": {n[:64]: {"confirmed": 40, "missing": 0,
                                                       "corrupt": 0, "unreachable": 0}
                                              for n in NODES}, "leases": lease}})
    for i in range(failures):
        t = now - (failures - i) * 6 * 3600
        records.append({"job": "backup", "start": t, "end": t + 12, "exit": 2,
                        "summary": {"error": {"code": "NOT_ENOUGH_NODES",
                                              "message": "no node answered; tried 6"}}})
    records.sort(key=lambda r: r["start"])
    return records


def snapshots(records):
    return [{"id": r["summary"]["snapshot"], "created": r["end"], "files": r["summary"]["files"],
             "bytes": 2_400_000_000 + r["summary"]["snapshot"] * 5_000_000,
             "paths": ["/home/me/docs", "/home/me/photos"]}
            for r in records if r["job"] == "backup" and r["exit"] == 0]


def state(name, now):
    jobs = {"backup": (DAY, None), "verify": (DAY, None), "check": (DAY, None)}
    states = {"backup": None, "verify": None, "check": None, "forget": "disabled in agent.toml"}
    running = None
    if name == "all-safe":
        records = history(now)
    elif name == "degraded":
        records = history(now, degraded_from=11)
    elif name == "backup-overdue":
        records = history(now, last_backup_age=4.2 * DAY, failures=3)
    else:
        records = history(now)
        running = {"job": "backup", "start": now - 42, "pid": 31337,
                   "progress": {"phase": "backup", "files_done": 1712, "total_files": 4393,
                                "bytes_done": 912 * 2 ** 20, "total_bytes": 2301 * 2 ** 20,
                                "percent_done": 39.6, "seconds_remaining": 64}}
    next_runs = {"backup": now + 3600, "verify": now + 8 * 3600, "check": now + 7 * 3600}
    return build_status(now, "/home/me/.flud", jobs, states, next_runs, records,
                        snapshots(records), running)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    args = parser.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium here (apt-get install chromium)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    now = time.time()
    with tempfile.TemporaryDirectory() as work:
        for name in ("all-safe", "degraded", "backup-overdue", "job-running"):
            page = os.path.join(work, f"{name}.html")
            with open(page, "w") as f:
                f.write(render(state(name, now), token="example-token"))
            shot = os.path.abspath(os.path.join(args.out, f"{name}.png"))
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                            "--hide-scrollbars", f"--user-data-dir={work}/profile",
                            f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}",
                            "file://" + page], capture_output=True, timeout=120, check=True)
            print(shot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
