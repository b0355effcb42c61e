"""The status page: HTML and inline SVG from the status data, on the server
(no JavaScript at all; the page reloads itself with a meta refresh). The
headline answers "is my data safe?" (safety.py's verdict); the actions are
forms that POST with the page's token (web.py). Every text that came from
outside (file names, messages, node ids) is escaped."""
import html
import math
import os
import time
import urllib.parse

from flud.agent.status import HEALTH_CLASSES

REFRESH_SECONDS = 10
PLOT_WIDTH, PLOT_HEIGHT, PLOT_LEFT = 640, 180, 60
SNAPSHOTS_SHOWN = 8   # the newest; `flud ls` lists them all
DOTS_UP_TO = 30   # points drawn as dots while a series has at most this many
COLOURS = ("#2b6cb0", "#d69e2e", "#dd6b20", "#9b2c2c", "#c53030")

STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#1a202c;max-width:1000px}
.verdict{padding:.8em 1em;border-radius:6px;border-left:8px solid;margin:.6em 0 1em}
.verdict h2{margin:0;font-size:1.25em}.verdict p{margin:.3em 0 0}.verdict ul{margin:.4em 0 0;padding-left:1.2em}
.level-ok{background:#f0fff4;border-color:#2f855a}.level-ok h2{color:#22543d}
.level-warn{background:#fffaf0;border-color:#dd6b20}.level-warn h2{color:#7b341e}
.level-alarm{background:#fff5f5;border-color:#c53030}.level-alarm h2{color:#742a2a}
.actions form{display:inline-block;margin:0 .4em .4em 0}
button{font-size:1em;padding:.35em .9em;border:1px solid #a0aec0;border-radius:4px;
background:#edf2f7;cursor:pointer}button:disabled{opacity:.55;cursor:default}button.primary{background:#2b6cb0;color:#fff;border-color:#2b6cb0}
.running{background:#ebf8ff;border:1px solid #90cdf4;padding:.5em .8em;border-radius:4px}
.bar{display:inline-block;width:200px;height:.8em;background:#e2e8f0;vertical-align:middle}
.bar span{display:block;height:100%;background:#3182ce}
input[type=text]{width:22em;font-size:.95em}#restore{margin:.6em 0 1em}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #e2e8f0;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.t{white-space:nowrap}figure{margin:.6em 0}figcaption{font-size:.85em}
.bad{color:#c53030}.warn{color:#dd6b20}.ok{color:#2f855a}.muted{color:#718096}
"""


def e(value) -> str:
    return html.escape(str(value), quote=True)


def when(t) -> str:
    if not isinstance(t, (int, float)):
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def human(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def plot(points, labels, title, show=None, counts=False) -> str:
    """An SVG line chart: points [[t, v1, v2, ...]], one line per label (only
    the lines whose index is in `show`, when given); the legend above the
    frame, each line's last value at its end, a dot at every point while
    there are few (after the first runs a plot has one point: it shows).
    counts: the values are counts (else bytes, shown in KiB, MiB...)."""
    short = (lambda v: f"{v:g}") if counts else _short
    if not points:
        return f'<p class="muted">{e(title)}: no data yet</p>'
    shown = [i for i in range(len(labels)) if show is None or i in show]
    ts = [p[0] for p in points]
    values = [p[i + 1] for p in points for i in shown]
    t0, t1 = min(ts), max(ts)
    top = nice_top(max(values) or 1, counts)
    left, right, head, foot = PLOT_LEFT, 90, 26, 22
    width, height = PLOT_WIDTH - left - right, PLOT_HEIGHT - head - foot

    def xy(t, v):
        x = left + (width * (t - t0) / (t1 - t0) if t1 > t0 else width / 2)
        y = head + height - height * v / top
        return x, y

    parts = [f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" '
             f'height="{PLOT_HEIGHT}" role="img" aria-label="{e(title)}">',
             f'<title>{e(title)}</title>',
             f'<rect x="{left}" y="{head}" width="{width}" height="{height}" '
             f'fill="#fbfdff" stroke="#cbd5e0"/>',
             f'<text x="{left - 4}" y="{head + 4}" font-size="10" text-anchor="end">'
             f'{e(short(top))}</text>',
             f'<text x="{left - 4}" y="{head + height}" font-size="10" text-anchor="end">0</text>']
    if t1 > t0:
        parts += [f'<text x="{left}" y="{PLOT_HEIGHT - 6}" font-size="10">{e(when(t0))}</text>',
                  f'<text x="{left + width}" y="{PLOT_HEIGHT - 6}" font-size="10" '
                  f'text-anchor="end">{e(when(t1))}</text>']
    else:
        parts.append(f'<text x="{left + width / 2}" y="{PLOT_HEIGHT - 6}" font-size="10" '
                     f'text-anchor="middle">{e(when(t0))}</text>')
    legend_x = left
    for n, i in enumerate(shown):
        label, colour = labels[i], COLOURS[i % len(COLOURS)]
        coords = [xy(p[0], p[i + 1]) for p in points]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{line}"><title>{e(label)}</title></polyline>')
        if len(points) <= DOTS_UP_TO:
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>'
                      for x, y in coords]
        x, y = coords[-1]
        parts.append(f'<text x="{x + 7:.1f}" y="{y + 4 + 11 * n * (len(points) == 1):.1f}" '
                     f'font-size="11" fill="{colour}">{e(short(points[-1][i + 1]))}</text>')
        parts.append(f'<rect x="{legend_x}" y="8" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{legend_x + 14}" y="17" font-size="12">{e(label)}</text>')
        legend_x += 24 + 7 * len(label)
    parts.append(f'</svg><figcaption class="muted">{e(title)}</figcaption></figure>')
    return "".join(parts)


def nice_top(v: float, counts: bool = False) -> float:
    """A round number a little above v, for a plot's top (1, 2, 2.5, 5 x 10^k
    of the unit v is shown in: counts, or KiB/MiB/GiB for bytes)."""
    unit = 1.0
    while not counts and v / unit >= 1024:
        unit *= 1024
    scaled = v * 1.1 / unit
    power = 10 ** math.floor(math.log10(scaled))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= scaled:
            return step * power * unit
    return 10 * power * unit


def _short(v) -> str:
    return human(v) if v >= 1024 else f"{v:g}"


def _head(status, title, refresh=True) -> list:
    return ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else "",
            f'<title>{e(title)}</title><style>{STYLE}</style></head><body>',
            f'<h1>flud agent</h1><p class="muted">home <code>{e(status["home"])}</code> · '
            f'as of {e(when(status["now"]))}</p>']


def render(status: dict, token: str = None) -> str:
    """The page; token: the forms' token (None: a page without actions)."""
    verdict = status.get("verdict")
    out = _head(status, f"flud: {verdict['headline'] if verdict else status['home']}")
    if verdict:
        out.append(_verdict(verdict))
    out.append(_running(status.get("running")))
    if status.get("power_pause"):
        out.append(f'<p id="power-pause" class="warn">no job starts now: '
                   f'{e(status["power_pause"])}</p>')
    if token:
        out.append(_actions(status, token))
    out.append(_leases(status.get("leases")))
    out.append(_notifications(status.get("notify")))
    out += (_jobs(status["jobs"]), _snapshots(status["snapshots"], token is not None),
            _health(status))
    series = status["series"]
    out.append('<h2>Over time</h2>')
    out.append(plot(series["stored_bytes"], ["bytes stored"],
                    "bytes stored on the nodes (from each check; before one, what backups sent)"))
    health = series["health"]
    labels = [k.replace("_", " ") for k in HEALTH_CLASSES]
    out.append(plot(health, labels, "objects at full redundancy, at each check", {0},
                    counts=True))
    # the troubled ones on a scale of their own (beside thousands of healthy
    # objects, 3 degraded would be a flat line), once there ever were any
    troubled = {i for i in range(1, len(HEALTH_CLASSES)) if any(p[i + 1] for p in health)}
    if troubled:
        out.append(plot(health, labels, "objects below full redundancy, at each check",
                        troubled, counts=True))
    out.append(_log(status["log"]))
    out.append('<p class="muted">The same data as JSON: <a href="/api/status">/api/status</a></p>')
    out.append("</body></html>")
    return "\n".join(out)


def _verdict(verdict) -> str:
    """The headline: one line, coloured by level, and the reasons under it."""
    # the worst reason is the headline: the list holds the others
    others = verdict["reasons"][1:] if verdict["level"] != "ok" else verdict["reasons"]
    reasons = "".join(f'<li class="{e(r["level"])}">{e(r["text"])}</li>' for r in others)
    details = verdict.get("details")
    return (f'<div id="verdict" class="verdict level-{e(verdict["level"])}" '
            f'data-level="{e(verdict["level"])}"><h2 id="headline">{e(verdict["headline"])}</h2>'
            + (f'<p id="details">{e(details)}</p>' if details else "")
            + (f'<ul id="reasons">{reasons}</ul>' if reasons else "") + '</div>')


def _running(running) -> str:
    if not running:
        return '<p id="running" class="muted">no job running</p>'
    line = (f'<b>{e(running["job"])}</b> running since {e(when(running["start"]))} '
            f'(pid {e(running.get("pid") or "starting")})')
    progress = running.get("progress") or {}
    if not progress:
        line += ' · starting'
    percent = progress.get("percent_done")
    if isinstance(percent, (int, float)):
        width = max(0.0, min(100.0, float(percent)))
        line += (f' <span class="bar"><span style="width:{width:.0f}%"></span></span> '
                 f'{width:.0f}%')
    if progress.get("total_files"):
        line += (f' · {e(progress.get("files_done", 0))}/{e(progress["total_files"])} files, '
                 f'{e(human(progress.get("bytes_done", 0)))}/'
                 f'{e(human(progress.get("total_bytes", 0)))}')
    if isinstance(progress.get("seconds_remaining"), (int, float)):
        line += f' · about {progress["seconds_remaining"]:.0f} s left'
    return f'<p id="running" class="running">{line}</p>'


def _form(action, label, token, fields=(), primary=False, ident=None, disabled=False) -> str:
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in fields)
    return (f'<form method="post" action="/action/{e(action)}">'
            f'<input type="hidden" name="token" value="{e(token)}">{hidden}'
            f'<button type="submit"{" class=primary" if primary else ""}'
            f'{f" id={ident}" if ident else ""}{" disabled" if disabled else ""}>'
            f'{e(label)}</button></form>')


def _actions(status, token) -> str:
    running = (status.get("running") or {}).get("job")
    out = ['<div class="actions" id="actions">',
           _form("backup", "Backup running" if running == "backup" else "Back up now", token,
                 primary=True, ident="backup-now", disabled=running == "backup"),
           _form("verify", "Verify running" if running == "verify" else "Verify now", token,
                 ident="verify-now", disabled=running == "verify")]
    paused = status.get("paused_until")
    if paused:
        out.append(f'<span class="warn">scheduled jobs paused until {e(when(paused))}</span> ')
        out.append(_form("resume", "Resume", token, ident="resume"))
    else:
        out.append(_form("pause", "Pause 1 h", token, [("for", "1h")], ident="pause-hour"))
        out.append(_form("pause", "Pause until tomorrow", token, [("for", "tomorrow")],
                         ident="pause-tomorrow"))
    out.append("</div>")
    return "".join(out)


def _leases(leases) -> str:
    """Until when the nodes keep this home's data (flud/client/lease_renewal.py)."""
    if not leases:
        return ('<p id="leases" class="muted">leases not renewed yet: the nodes keep an '
                'owner\'s data for their lease (a year by default) after a job last reached '
                'them; every job renews it</p>')
    day = time.strftime("%Y-%m-%d", time.localtime(leases["kept_until"]))
    return (f'<p id="leases">the nodes keep this home\'s data until at least <b>{e(day)}</b> '
            f'(leases renewed {e(when(leases.get("renewed")))}); every job renews them</p>')


def _notifications(state) -> str:
    """Who hears when something goes wrong ([notify] in agent.toml), and
    whether the last delivery arrived: a notifier that cannot deliver is
    as silent as none."""
    if not state:
        return ('<p id="notify" class="warn">no notifications: nobody is told when '
                'backups stop or data is at risk (set [notify] urls or ping_url in '
                'agent.toml)</p>')
    where = []
    if state["urls"]:
        where.append(f'{state["urls"]} destination(s) ({", ".join(state["events"])})')
    if state["ping"]:
        where.append("a dead-man's switch ping")
    last = state.get("last_delivery")
    if last is None:
        tail, cls = "nothing sent yet", ""
    elif last["ok"]:
        tail, cls = f'last sent {when(last["at"])} ({last["what"]})', ""
    else:
        tail, cls = (f'last delivery FAILED {when(last["at"])} ({last["what"]}: '
                     f'{last["error"]})', ' class="warn"')
    if state.get("dropped"):
        tail += f'; {state["dropped"]} dropped'
    return f'<p id="notify"{cls}>notifications to {e(" and ".join(where))}: {e(tail)}</p>'


def _jobs(rows) -> str:
    out = ['<h2>Jobs</h2><table id="jobs"><tr><th>job</th><th>schedule</th><th>state</th>'
           '<th>last run</th><th>result</th><th>next run</th></tr>']
    for row in rows:
        last = row["last"] or {}
        cls = "" if last.get("exit") in (None, 0) else ' class="bad"'
        out.append(f'<tr><td>{e(row["name"])}</td><td>{e(row["schedule"] or "—")}</td>'
                   f'<td>{e(row["state"])}</td><td class="t">{e(when(last.get("start")))}</td>'
                   f'<td{cls}>{e(last.get("line", "never ran"))}</td>'
                   f'<td class="t">{e(when(row["next"]) if row["state"] in ("scheduled", "running") else "—")}'
                   f'</td></tr>')
    out.append("</table>")
    return "".join(out)


def _snapshots(snapshots, browsable=False) -> str:
    if not snapshots:
        return '<h2>Snapshots</h2><p id="snapshots" class="muted">no snapshots yet</p>'
    out = ['<h2>Snapshots</h2><table id="snapshots"><tr><th>snapshot</th><th>made</th>'
           '<th>files</th><th>bytes</th><th>paths</th>'
           + ('<th></th>' if browsable else '') + '</tr>']
    for s in reversed(snapshots[-SNAPSHOTS_SHOWN:]):
        link = (f'<td><a href="/browse?snapshot={e(s.get("id"))}">browse</a></td>'
                if browsable else "")
        out.append(f'<tr><td class="n">{e(s.get("id"))}</td><td class="t">{e(when(s.get("created")))}</td>'
                   f'<td class="n">{e(s.get("files"))}</td>'
                   f'<td class="n">{e(human(s.get("bytes", 0)))}</td>'
                   f'<td><code>{e(" ".join(s.get("paths") or ()))}</code></td>{link}</tr>')
    out.append("</table>")
    if len(snapshots) > SNAPSHOTS_SHOWN:
        out.append(f'<p class="muted">and {len(snapshots) - SNAPSHOTS_SHOWN} older: '
                   f'`flud ls` lists them all</p>')
    return "".join(out)


def _health(status) -> str:
    out = ['<h2>Health</h2>']
    health = status["health"]
    if health is None:
        out.append('<p id="health" class="muted">no check yet</p>')
    else:
        o = health["objects"]
        out.append(f'<p id="health">objects: <span class="ok">{e(o["healthy"])} healthy</span>, '
                   f'{e(o["degraded"])} degraded, '
                   f'<span class="{"warn" if o["at_risk"] else ""}">{e(o["at_risk"])} at risk</span>, '
                   f'<span class="{"bad" if o["unavailable"] else ""}">'
                   f'{e(o["unavailable"])} unavailable</span>, '
                   f'<span class="{"bad" if o["lost"] else ""}">{e(o["lost"])} lost</span>; '
                   f'repairs done: {e(status["repaired"])} '
                   f'({e(human(health["recreated_bytes"]))} re-created in the last check)</p>')
        sized = any(n["bytes"] for n in health["nodes"])  # a check that reports bytes
        out.append('<table id="nodes"><tr><th>node</th><th>reachable</th><th>shares</th>'
                   '<th>ok</th><th>corrupt</th><th>missing</th>'
                   + ('<th>bytes stored</th>' if sized else '') + '</tr>')
        for n in health["nodes"]:
            out.append(f'<tr><td><code>{e(n["node"][:16])}</code></td>'
                       f'<td class="{"ok" if n["reachable"] else "bad"}">'
                       f'{"yes" if n["reachable"] else "no"}</td>'
                       + "".join(f'<td class="n">{e(n[k])}</td>'
                                 for k in ("shares", "ok", "corrupt", "missing"))
                       + (f'<td class="n">{e(human(n["bytes"]))}</td>' if sized else '')
                       + '</tr>')
        out.append("</table>")
    verify = status["verify"]
    if verify is None:
        out.append('<p id="verify" class="muted">no verify yet</p>')
    else:
        t = verify["totals"]
        out.append(f'<p id="verify">last verify ({e(when(verify["at"]))}): '
                   f'<span class="ok">{e(t.get("confirmed", 0))} shares confirmed</span>, '
                   f'{e(t.get("missing", 0))} missing, {e(t.get("corrupt", 0))} corrupt, '
                   f'{e(t.get("unreachable", 0))} unreachable, on {len(verify["nodes"])} nodes</p>')
        out.append('<table id="verify-nodes"><tr><th>node</th><th>confirmed</th><th>missing</th>'
                   '<th>corrupt</th><th>unreachable</th></tr>')
        for n in verify["nodes"]:
            bad = n.get("missing", 0) or n.get("corrupt", 0) or n.get("unreachable", 0)
            out.append(f'<tr{" class=bad" if bad else ""}><td><code>{e(n["node"][:16])}</code></td>'
                       + "".join(f'<td class="n">{e(n.get(k, 0))}</td>'
                                 for k in ("confirmed", "missing", "corrupt", "unreachable"))
                       + "</tr>")
        out.append("</table>")
    return "".join(out)


def _log(log) -> str:
    if not log:
        return '<h2>Last runs</h2><p id="log" class="muted">no runs yet</p>'
    out = ['<h2>Last runs</h2><table id="log"><tr><th>job</th><th>started</th><th>took</th>'
           '<th>exit</th><th>result</th></tr>']
    for r in log:
        took = (f"{r['end'] - r['start']:.1f} s"
                if isinstance(r.get("end"), (int, float)) and isinstance(r.get("start"), (int, float))
                else "—")
        cls = "" if r.get("exit") in (0,) else ' class="bad"'
        out.append(f'<tr><td>{e(r["job"])}</td><td class="t">{e(when(r.get("start")))}</td><td>{e(took)}</td>'
                   f'<td{cls}>{e(r.get("exit"))}</td><td>{e(r["line"])}</td></tr>')
    out.append("</table>")
    return "".join(out)


def render_browse(status, snapshot: int, path: str, listing: dict, token: str) -> str:
    """One directory of a snapshot, its subdirectories linked, each entry
    (and the directory itself) with a form that restores it to a folder."""
    out = _head(status, f"flud: snapshot {snapshot} /{path}", refresh=False)
    crumbs = [f'<a href="/">status</a> › <a href="{_browse_url(snapshot, "")}">snapshot '
              f'{e(snapshot)}</a>']
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        crumbs.append(f'<a href="{_browse_url(snapshot, "/".join(parts[:i + 1]))}">{e(part)}</a>')
    out.append(f'<p id="crumbs">{" / ".join(crumbs)}</p>')
    default = os.path.join(os.path.expanduser("~"), "flud-restored", f"snapshot-{snapshot}")
    made = next((x for x in status.get("snapshots", ()) if x.get("id") == snapshot), None)
    if made:
        out.append(f'<p>snapshot {e(snapshot)}, made {e(when(made.get("created")))} of '
                   f'<code>{e(" ".join(made.get("paths") or ()))}</code></p>')
    if listing.get("error"):
        out.append(f'<p id="browse-error" class="bad">{e(listing["error"])}</p>')
    # one form: the folder, and a button per entry that names its path (a
    # submit button's name and value travel with the form)
    out.append('<form method="post" action="/action/restore" id="restore">'
               f'<input type="hidden" name="token" value="{e(token)}">'
               f'<input type="hidden" name="snapshot" value="{e(snapshot)}">'
               f'<label>restore to folder <input type="text" name="dest" value="{e(default)}">'
               f'</label> <button type="submit" name="path" value="{e(path)}" class="primary">'
               f'Restore {"this directory" if path else "the whole snapshot"}</button>'
               '<div class="muted">nothing in the folder is overwritten: a file that is '
               'there already gets the restored one beside it, as NAME.flud-restored</div>'
               '</form>')
    out.append('<table id="entries"><tr><th>name</th><th>kind</th><th>size</th>'
               '<th>modified</th><th></th></tr>')
    for entry in listing.get("entries", ()):
        name, kind = entry["name"], entry["kind"]
        shown = (f'<a href="{_browse_url(snapshot, entry["path"])}">{e(name)}/</a>'
                 if kind == "dir" else e(name) + (f' → {e(entry["target"])}'
                                                   if entry.get("target") else ""))
        out.append(f'<tr><td>{shown}</td><td>{e(kind)}</td>'
                   f'<td class="n">{e(human(entry["size"])) if kind == "file" else ""}</td>'
                   f'<td class="t">{e(when(entry["mtime_ns"] / 1e9))}</td>'
                   f'<td><button type="submit" form="restore" name="path" '
                   f'value="{e(entry["path"])}" class="restore">Restore</button></td></tr>')
    out.append("</table>")
    if listing.get("truncated"):
        out.append('<p class="muted">more entries than shown</p>')
    out.append("</body></html>")
    return "\n".join(out)


def _browse_url(snapshot, path) -> str:
    return e("/browse?" + urllib.parse.urlencode({"snapshot": snapshot, "path": path}))
