"""Bandwidth by the time of day, and no jobs on battery: pure (the moment
and the battery probe are passed in).

agent.toml:

    [limits]                 # outside every window below
    upload = 0               # 0: no limit
    download = 0

    [[bandwidth]]            # a window: its limits replace [limits] inside it
    from = "08:00"
    to = "18:00"             # "22:00" to "06:00" runs over midnight
    days = ["mon", "tue", "wed", "thu", "fri"]   # optional: every day
    upload = "1MiB/s"        # a key left out keeps [limits]' value
    download = "4MiB/s"

    [power]
    pause_on_battery = true  # start no job while the machine runs on battery

The first window that holds the moment wins. A job is given the limits of
the moment it starts (its child process keeps them for its run).
"""
import dataclasses
import datetime

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclasses.dataclass(frozen=True)
class Window:
    start: tuple            # (hour, minute)
    end: tuple              # (hour, minute); (24, 0) is midnight at the end
    upload: int = None      # bytes/s (0: no limit), None: [limits]' value
    download: int = None
    days: tuple = DAYS

    def holds(self, moment: datetime.datetime) -> bool:
        minute = moment.hour * 60 + moment.minute
        start = self.start[0] * 60 + self.start[1]
        end = self.end[0] * 60 + self.end[1]
        day = DAYS[moment.weekday()]
        if start <= end:
            return start <= minute < end and day in self.days
        # over midnight: the evening part belongs to its own day, the
        # morning part to the day before
        if minute >= start:
            return day in self.days
        yesterday = DAYS[(moment.weekday() - 1) % 7]
        return minute < end and yesterday in self.days


def limits_at(windows, upload: int, download: int, moment: datetime.datetime) -> tuple:
    """(upload, download) in bytes/s at `moment` (local time): the first
    window holding it, else the defaults."""
    for window in windows:
        if window.holds(moment):
            return (upload if window.upload is None else window.upload,
                    download if window.download is None else window.download)
    return upload, download


def parse_windows(entries, error, parse_time, parse_rate) -> tuple:
    """Windows from the [[bandwidth]] tables; error(index, key, what)
    builds the error to raise."""
    if not isinstance(entries, list):
        raise error(0, None, "write each window as a [[bandwidth]] table")
    windows = []
    for index, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise error(index, None, "write each window as a [[bandwidth]] table")
        unknown = set(entry) - {"from", "to", "upload", "download", "days"}
        if unknown:
            raise error(index, sorted(unknown)[0], "unknown key; known: from, to, days, "
                                                   "upload, download")
        for key in ("from", "to"):
            if key not in entry:
                raise error(index, key, f"missing: give `{key} = \"HH:MM\"`")
        values = {}
        for key, parser in (("from", parse_time), ("to", parse_time), ("upload", parse_rate),
                            ("download", parse_rate)):
            if key in entry:
                try:
                    values[key] = parser(entry[key])
                except ValueError as err:
                    raise error(index, key, str(err)) from None
        if values["from"] == values["to"]:
            raise error(index, "to", "a window from a time to the same time is empty")
        days = entry.get("days", list(DAYS))
        if (not isinstance(days, list) or not days
                or not all(isinstance(d, str) and d.lower()[:3] in DAYS for d in days)):
            raise error(index, "days", f"expected a list of days such as [\"mon\", \"sat\"], "
                                       f"got {days!r}")
        windows.append(Window(values["from"], values["to"], values.get("upload"),
                              values.get("download"), tuple(d.lower()[:3] for d in days)))
    return tuple(windows)


def on_battery(probe=None) -> bool:
    """True when the platform says the machine runs on battery (psutil's
    sensors_battery: None where there is no battery or no way to know)."""
    if probe is None:
        import psutil
        probe = getattr(psutil, "sensors_battery", lambda: None)
    try:
        battery = probe()
    except Exception:   # a sensor that cannot be read says nothing
        return False
    return battery is not None and battery.power_plugged is False


def schedule_json(windows, upload: int, download: int) -> str:
    """The windows and the defaults as the compact JSON a job's
    --limit-schedule takes (the job follows the windows while it runs)."""
    import json
    return json.dumps({"upload": upload, "download": download, "windows": [
        [list(w.start), list(w.end), w.upload, w.download, list(w.days)] for w in windows]},
        separators=(",", ":"))


def schedule_from_json(text: str) -> tuple:
    """(windows, upload, download) from schedule_json's text; ValueError if
    it is not that."""
    import json
    try:
        data = json.loads(text)
        windows = tuple(Window(tuple(start), tuple(end), up, down, tuple(days))
                        for start, end, up, down, days in data["windows"])
        upload, download = int(data["upload"]), int(data["download"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"not a bandwidth schedule: {err}") from None
    for window in windows:
        if any(not isinstance(v, (int, type(None))) for v in (window.upload, window.download)):
            raise ValueError("not a bandwidth schedule: rates are whole numbers")
    return windows, upload, download
