"""What the status page and /api/status show, from the agent's state: pure.

Health and the nodes' share counts come from the newest `check` run's
summary (`flud check --json`, read tolerantly: see health_of); until a
check has run, health is None ("no check yet"). The newest `verify` run's per-node counts are shown beside it. The
time series are read off the history: bytes stored (a check's total, or
the sum of what backups sent) and health per check. Until when the nodes
keep this home's data is the newest job summary's `leases`.
"""

from flud.agent.notify import succeeded
from flud.agent.safety import Rules, SafetyState, safety_verdict

LOG_RUNS = 20
SERIES_POINTS = 200


def schedule_text(every, at) -> str:
    if at is not None:
        return f"daily at {at[0]:02d}:{at[1]:02d}"
    for unit, seconds in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if every >= seconds and every % seconds == 0:
            return f"every {int(every // seconds)}{unit}"
    return f"every {every:g}s"


def _size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def run_line(record) -> str:
    """One line of the log for a run."""
    summary = record.get("summary") or {}
    error = record.get("error") or (summary.get("error") or {}).get("message")
    if error:
        return f"failed: {error}"
    job = record["job"]
    if job == "backup" and "snapshot" in summary:
        return (f"snapshot {summary['snapshot']}: {summary.get('files', 0)} files, "
                f"{_size(summary.get('bytes_sent', 0))} sent")
    if job == "verify" and "totals" in summary:
        t = summary["totals"]
        return (f"{t.get('confirmed', 0)} confirmed, {t.get('missing', 0)} missing, "
                f"{t.get('corrupt', 0)} corrupt, {t.get('unreachable', 0)} unreachable")
    found = health_of(summary) if job == "check" else None
    if found is not None:
        o = found["objects"]
        return (f"{o['healthy']} healthy, {o['degraded']} degraded, {o['at_risk']} at risk, "
                f"{o['unavailable']} unavailable, {o['lost']} lost, {found['repaired']} repaired")
    return f"exit {record.get('exit')}"


# What a check says of each object, best first (flud/client/repair/object_health.py's
# classes; the agent reads them from the job's JSON, never imports the client).
HEALTH_CLASSES = ("healthy", "degraded", "at_risk", "unavailable", "lost")


def health_of(summary):
    """A check summary (CheckReport.summary(): counts {healthy, degraded,
    at_risk, unavailable, lost, repaired}, nodes [{node, reachable, shares, ok, corrupt, missing}])
    -> {objects, nodes, repaired, recreated_bytes}, or None."""
    if not isinstance(summary, dict):
        return None
    counts = summary.get("counts")
    if not isinstance(counts, dict):
        return None
    objects = {k: int(counts.get(k, 0)) for k in HEALTH_CLASSES}
    nodes = []
    rows = summary.get("nodes") or []
    if isinstance(rows, dict):
        rows = [{"node": node, **info} for node, info in rows.items() if isinstance(info, dict)]
    for info in rows:
        if not isinstance(info, dict):
            continue
        nodes.append({"node": str(info.get("node", "?")),
                      "reachable": bool(info.get("reachable", True)),
                      **{k: int(info.get(k) or 0)
                         for k in ("shares", "ok", "corrupt", "missing", "bytes")}})
    nodes.sort(key=lambda n: n["node"])
    recreated = summary.get("recreated") if isinstance(summary.get("recreated"), dict) else {}
    return {"objects": objects, "nodes": nodes, "repaired": int(counts.get("repaired", 0)),
            "recreated_bytes": int(recreated.get("bytes", 0))}


def series(records) -> dict:
    """Time series: bytes stored [[t, bytes]], health [[t, one count per
    HEALTH_CLASSES]]."""
    stored, health, sent = [], [], 0
    for record in records:
        summary = record.get("summary") or {}
        when = record.get("end") or record.get("start")
        if record["job"] == "check" and record.get("exit") == 2 and "counts" in summary:
            # objects unavailable or lost: the run is an error, its counts the news
            found = health_of(summary)
            health.append([when, *(found["objects"][k] for k in HEALTH_CLASSES)])
            continue
        if record.get("exit") not in (0, 1) or summary.get("error"):
            continue
        if record["job"] == "backup" and "bytes_sent" in summary:
            sent += int(summary["bytes_sent"])
            stored.append([when, sent])
        elif record["job"] == "check":
            found = health_of(summary)
            if found is not None:
                o = found["objects"]
                health.append([when, *(o[k] for k in HEALTH_CLASSES)])
                total = sum(n["bytes"] for n in found["nodes"])
                if total:
                    sent = total
                    stored.append([when, total])
    return {"stored_bytes": stored[-SERIES_POINTS:], "health": health[-SERIES_POINTS:]}


def leases_of(records):
    """{renewed, lease_seconds, kept_until} from the newest run that reported
    its renewal (every job's summary says: flud/client/lease_renewal.py), or None."""
    for record in reversed(records):
        leases = (record.get("summary") or {}).get("leases")
        if isinstance(leases, dict) and isinstance(leases.get("kept_until"), (int, float)):
            return {k: leases.get(k) for k in ("renewed", "lease_seconds", "kept_until")}
    return None


def safety_state(now, jobs, records, health, verify, leases, paused_until=None):
    """The SafetyState (flud/agent/safety.py) of this history."""
    backups = [r for r in records if r["job"] == "backup"]
    # one rule for "succeeded" with the notices (flud/agent/notify.py): a
    # backup that exits 1 counts only when it made its snapshot
    ok = [r for r in backups if succeeded(r) and not (r.get("summary") or {}).get("error")]
    failure = None
    if backups and backups[-1] not in ok:
        failure = {"at": backups[-1].get("end"),
                   "message": run_line(backups[-1]).removeprefix("failed: ")}
    checks = [r for r in records if r["job"] == "check" and health_of(r.get("summary"))]
    every, at = jobs.get("backup", (None, None))
    totals = (verify or {}).get("totals") or {}
    return SafetyState(
        now=now, backup_every=every if at is None else 86400.0,
        last_success=(ok[-1].get("end") or ok[-1].get("start")) if ok else None,
        last_failure=failure,
        objects=None if health is None else health["objects"],
        checked_at=checks[-1].get("end") if checks else None,
        verify_bad=int(totals.get("missing", 0)) + int(totals.get("corrupt", 0)),
        kept_until=(leases or {}).get("kept_until"), paused_until=paused_until)


def verdict_of(now, jobs, records, paused_until=None, rules=None):
    """The safety Verdict of a history alone (for whatever warns a person:
    the same rules as the page's headline). jobs: name -> (every, at)."""
    checks = [r for r in records if r["job"] == "check"]
    health = health_of(checks[-1].get("summary")) if checks else None
    verify = None
    for record in reversed(records):
        if record["job"] == "verify" and (record.get("summary") or {}).get("totals"):
            verify = {"totals": record["summary"]["totals"]}
            break
    return safety_verdict(safety_state(now, jobs, records, health, verify, leases_of(records),
                                       paused_until), rules or Rules())


def build_status(now, home, jobs, states, next_runs, records, snapshots, running,
                 paused_until=None, rules=None, power_pause=None, notify_state=None) -> dict:
    """jobs: name -> (every, at); states: name -> None or why it does not run;
    next_runs: name -> time; records: history, oldest first; snapshots: from
    `flud ls --json`; running: {job, start, pid} or None; power_pause: why no
    job starts now (on battery), or None; notify_state: the notifier's
    Notifier.state() (destinations, deliveries), or None without one."""
    last = {}
    for record in records:
        last[record["job"]] = record
    rows = []
    for name, why in states.items():
        record = last.get(name)
        rows.append({
            "name": name,
            "schedule": schedule_text(*jobs[name]) if name in jobs else None,
            "state": "running" if running and running["job"] == name
            else ("scheduled" if why is None else why),
            "next": next_runs.get(name),
            "last": None if record is None else {
                "start": record.get("start"), "end": record.get("end"),
                "exit": record.get("exit"), "line": run_line(record)},
        })
    checks = [r for r in records if r["job"] == "check"]
    verifies = [r for r in records if r["job"] == "verify" and (r.get("summary") or {}).get("totals")]
    health = health_of(checks[-1].get("summary")) if checks else None
    verify = None
    if verifies:
        s = verifies[-1]["summary"]
        verify = {"at": verifies[-1].get("end"), "totals": s["totals"],
                  "nodes": [{"node": n, **c} for n, c in sorted((s.get("nodes") or {}).items())]}
    log = [{"job": r["job"], "start": r.get("start"), "end": r.get("end"),
            "exit": r.get("exit"), "line": run_line(r)} for r in records[-LOG_RUNS:]][::-1]
    leases = leases_of(records)
    verdict = safety_verdict(safety_state(now, jobs, records, health, verify, leases,
                                          paused_until), rules or Rules())
    return {"home": home, "now": now, "running": running, "jobs": rows,
            "power_pause": power_pause, "notify": notify_state,
            "verdict": verdict.as_dict(), "paused_until": paused_until,
            "snapshots": list(snapshots or []), "health": health,
            "repaired": sum((health_of(r.get("summary")) or {}).get("repaired", 0)
                            for r in checks),
            "verify": verify, "series": series(records), "log": log,
            "leases": leases}
