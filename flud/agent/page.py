"""The status page: HTML and inline SVG from the status data, on the server
(no JavaScript libraries; the page reloads itself with a meta refresh).
Every text that came from outside (file names, messages, node ids) is
escaped."""
import html
import time

from flud.agent.status import HEALTH_CLASSES

REFRESH_SECONDS = 10
PLOT_WIDTH, PLOT_HEIGHT, MARGIN = 560, 150, 40
COLOURS = ("#2b6cb0", "#d69e2e", "#dd6b20", "#9b2c2c", "#c53030")

STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#1a202c}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #e2e8f0;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
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


def plot(points, labels, title) -> str:
    """An SVG line chart: points [[t, v1, v2, ...]], one line per label."""
    if not points:
        return f'<p class="muted">{e(title)}: no data yet</p>'
    ts = [p[0] for p in points]
    values = [v for p in points for v in p[1:]]
    t0, t1 = min(ts), max(ts)
    top = max(values) or 1
    width, height = PLOT_WIDTH - 2 * MARGIN, PLOT_HEIGHT - 2 * MARGIN // 2

    def xy(t, v):
        x = MARGIN + (width * (t - t0) / (t1 - t0) if t1 > t0 else width / 2)
        y = MARGIN // 2 + height - height * v / top
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" '
             f'height="{PLOT_HEIGHT}" role="img" aria-label="{e(title)}">',
             f'<title>{e(title)}</title>',
             f'<rect x="{MARGIN}" y="{MARGIN // 2}" width="{width}" height="{height}" '
             f'fill="none" stroke="#cbd5e0"/>',
             f'<text x="2" y="{MARGIN // 2 + 10}" font-size="10">{e(_short(top))}</text>',
             f'<text x="2" y="{MARGIN // 2 + height}" font-size="10">0</text>',
             f'<text x="{MARGIN}" y="{PLOT_HEIGHT - 4}" font-size="10">{e(when(t0))}</text>',
             f'<text x="{MARGIN + width}" y="{PLOT_HEIGHT - 4}" font-size="10" '
             f'text-anchor="end">{e(when(t1))}</text>']
    for i, label in enumerate(labels):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(xy(p[0], p[i + 1]) for p in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{line}"><title>{e(label)}</title></polyline>')
        if len(points) == 1:
            x, y = xy(points[0][0], points[0][i + 1]).split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{MARGIN + 6 + 90 * i}" y="{MARGIN // 2 + 12}" font-size="11" '
                     f'fill="{colour}">{e(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(v) -> str:
    return human(v) if v >= 1024 else f"{v:g}"


def render(status: dict) -> str:
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">',
           f'<title>flud agent — {e(status["home"])}</title><style>{STYLE}</style></head><body>',
           f'<h1>flud agent</h1><p>home <code>{e(status["home"])}</code> · '
           f'as of {e(when(status["now"]))}</p>']
    running = status.get("running")
    if running:
        out.append(f'<p id="running">running: <b>{e(running["job"])}</b> since '
                   f'{e(when(running["start"]))} (pid {e(running.get("pid"))})</p>')
    out.append(_leases(status.get("leases")))
    out += _jobs(status["jobs"]), _snapshots(status["snapshots"]), _health(status)
    series = status["series"]
    out.append('<h2>Over time</h2>')
    out.append(plot(series["stored_bytes"], ["bytes stored"], "bytes stored"))
    out.append(plot(series["health"], [k.replace("_", " ") for k in HEALTH_CLASSES],
                    "objects by health"))
    out.append(_log(status["log"]))
    out.append('<p class="muted">The same data as JSON: <a href="/api/status">/api/status</a></p>')
    out.append("</body></html>")
    return "\n".join(out)


def _leases(leases) -> str:
    """Until when the nodes keep this home's data (flud/client/lease_renewal.py)."""
    if not leases:
        return ('<p id="leases" class="muted">leases not renewed yet: the nodes keep an '
                'owner\'s data for their lease (a year by default) after a job last reached '
                'them; every job renews it</p>')
    day = time.strftime("%Y-%m-%d", time.localtime(leases["kept_until"]))
    return (f'<p id="leases">the nodes keep this home\'s data until at least <b>{e(day)}</b> '
            f'(leases renewed {e(when(leases.get("renewed")))}); every job renews them</p>')


def _jobs(rows) -> str:
    out = ['<h2>Jobs</h2><table id="jobs"><tr><th>job</th><th>schedule</th><th>state</th>'
           '<th>last run</th><th>result</th><th>next run</th></tr>']
    for row in rows:
        last = row["last"] or {}
        cls = "" if last.get("exit") in (None, 0) else ' class="bad"'
        out.append(f'<tr><td>{e(row["name"])}</td><td>{e(row["schedule"] or "—")}</td>'
                   f'<td>{e(row["state"])}</td><td>{e(when(last.get("start")))}</td>'
                   f'<td{cls}>{e(last.get("line", "never ran"))}</td>'
                   f'<td>{e(when(row["next"]) if row["state"] in ("scheduled", "running") else "—")}'
                   f'</td></tr>')
    out.append("</table>")
    return "".join(out)


def _snapshots(snapshots) -> str:
    if not snapshots:
        return '<h2>Snapshots</h2><p id="snapshots" class="muted">no snapshots yet</p>'
    out = ['<h2>Snapshots</h2><table id="snapshots"><tr><th>snapshot</th><th>made</th>'
           '<th>files</th><th>bytes</th></tr>']
    for s in reversed(snapshots[-30:]):
        out.append(f'<tr><td class="n">{e(s.get("id"))}</td><td>{e(when(s.get("created")))}</td>'
                   f'<td class="n">{e(s.get("files"))}</td>'
                   f'<td class="n">{e(human(s.get("bytes", 0)))}</td></tr>')
    out.append("</table>")
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
        out.append(f'<tr><td>{e(r["job"])}</td><td>{e(when(r.get("start")))}</td><td>{e(took)}</td>'
                   f'<td{cls}>{e(r.get("exit"))}</td><td>{e(r["line"])}</td></tr>')
    out.append("</table>")
    return "".join(out)
