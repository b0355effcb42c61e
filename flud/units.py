"""One grammar for durations, sizes and rates, used by every command-line
option and by agent.toml: pure, imports nothing of flud but its errors.

Durations: numbers each followed by a unit, largest first, each unit once,
spaces allowed: "7d", "1y2mo", "36h", "90s", "1w 2d", "1.5h", "30min", "0".

    y yr year years                      calendar years
    mo mon month months                  calendar months
    w wk week weeks
    d day days
    h hr hour hours
    min mins minute minutes
    s sec secs second seconds

A bare `m` is refused: in cron and restic's --keep-within it means months,
in sleep(1) and most configuration files minutes; flud had both meanings.
The message names the two spellings to choose from. A bare number is taken
only where the option says in which unit (the node's seconds, say).

Sizes: a number, then B, K, M, G, T, or KiB, MiB, GiB, TiB, in powers of
1024: "64M", "10GiB", "1.5k", "123" (bytes where the caller says so).
"MB", "GB" are refused: half of the world reads them as 10^6 and 10^9.
Rates are sizes per second ("1MiB/s", "500K"); a bare number is KiB/s.
"""
import datetime
import re
from typing import NamedTuple

from flud.errors import FludError


class UnitError(FludError, ValueError):
    """A duration, a size or a rate that cannot be read."""

    code = "BAD_UNIT"


class BadDuration(UnitError):
    code = "BAD_DURATION"


class BadSize(UnitError):
    code = "BAD_SIZE"


MAX_DURATION_NUMBER = 100_000

# unit -> (field, spellings)
_DURATION_UNITS = (
    ("years", ("y", "yr", "yrs", "year", "years")),
    ("months", ("mo", "mon", "mons", "month", "months")),
    ("weeks", ("w", "wk", "wks", "week", "weeks")),
    ("days", ("d", "day", "days")),
    ("hours", ("h", "hr", "hrs", "hour", "hours")),
    ("minutes", ("min", "mins", "minute", "minutes")),
    ("seconds", ("s", "sec", "secs", "second", "seconds")),
)
_SPELLING = {spelling: field for field, spellings in _DURATION_UNITS for spelling in spellings}
_FIELDS = tuple(field for field, _ in _DURATION_UNITS)
_SHORT = {"years": "y", "months": "mo", "weeks": "w", "days": "d", "hours": "h",
          "minutes": "min", "seconds": "s"}
_SECONDS = {"weeks": 7 * 86400, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
_AMBIGUOUS = ("m",)   # "M" too: the spellings compare in lower case
_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_EXAMPLES = "such as 7d, 2w, 36h, 30min, 90s or 1y2mo"


class Duration(NamedTuple):
    """A duration as written: years and months count on the calendar (a
    month back from 31 March is 28 or 29 February), weeks and days in local
    days, hours, minutes and seconds in real time."""
    years: int = 0
    months: int = 0
    weeks: float = 0
    days: float = 0
    hours: float = 0
    minutes: float = 0
    seconds_part: float = 0

    @property
    def is_zero(self) -> bool:
        return not any(self)

    @property
    def fixed(self) -> bool:
        """Its length does not depend on the date (no years or months)."""
        return not (self.years or self.months)

    def seconds(self) -> float:
        """Its length in seconds, for durations without years or months
        (a grace period, an interval)."""
        if not self.fixed:
            raise BadDuration(f"{self}: a duration in years or months has no fixed length: "
                              f"give it in weeks, days, hours, minutes or seconds")
        return float((self.weeks * 7 + self.days) * 86400 + self.hours * 3600
                     + self.minutes * 60 + self.seconds_part)

    def before(self, moment: datetime.datetime) -> datetime.datetime:
        """The moment this long before `moment` (an aware datetime)."""
        month_index = moment.year * 12 + (moment.month - 1) - self.years * 12 - self.months
        year, month = divmod(month_index, 12)
        month += 1
        day = min(moment.day, _days_in_month(year, month))
        wall = moment.replace(year=year, month=month, day=day, tzinfo=None)
        wall -= datetime.timedelta(days=self.weeks * 7 + self.days)
        # the same wall-clock time on that date (its own offset), then the
        # rest in real time (aware arithmetic in Python is wall-clock arithmetic)
        seconds = (wall.replace(tzinfo=moment.tzinfo).timestamp() - self.hours * 3600
                   - self.minutes * 60 - self.seconds_part)
        return datetime.datetime.fromtimestamp(seconds, moment.tzinfo)

    def __str__(self) -> str:
        text = "".join(f"{value:g}{_SHORT[field]}" for field, value in zip(_FIELDS, self)
                       if value)
        return text or "0"


def _days_in_month(year: int, month: int) -> int:
    following = datetime.date(year + month // 12, month % 12 + 1, 1)
    return (following - datetime.timedelta(days=1)).day


def parse_duration(text, bare: str = None) -> Duration:
    """A Duration from text such as "7d", "1y2mo", "1w 2d", "30min".
    bare: the unit of a number written without one ("s": the node's
    seconds); None refuses it. BadDuration says what is wrong."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise BadDuration(f"expected a duration {_EXAMPLES}, got {text!r}")
    if isinstance(text, (int, float)):
        text = f"{text:g}" if bare else str(text)
    source = text.strip()
    if not source:
        raise BadDuration(f"an empty duration: give one {_EXAMPLES}")
    if re.fullmatch(r"0+(\.0*)?", source):
        return Duration()
    if bare is not None and re.fullmatch(r"\d+(\.\d+)?", source):
        return _with(Duration(), _SPELLING[bare], float(source), source)
    duration, position, last = Duration(), 0, -1
    while position < len(source):
        match = _TERM.match(source, position)
        if match is None:
            raise BadDuration(f"{source!r}: {source[position]!r} is not a number (a duration "
                              f"is numbers with units, {_EXAMPLES})")
        number, unit = match.group(1), match.group(2).lower()
        if not unit:
            raise BadDuration(f"{source!r}: {number} has no unit (y, mo, w, d, h, min or s)")
        if unit in _AMBIGUOUS:
            raise BadDuration(f"{source!r}: the unit 'm' is ambiguous: write '{number}min' for "
                              f"minutes or '{number}mo' for months")
        if unit not in _SPELLING:
            raise BadDuration(f"{source!r}: unknown unit {match.group(2)!r} (y years, mo months, "
                              f"w weeks, d days, h hours, min minutes, s seconds)")
        field = _SPELLING[unit]
        index = _FIELDS.index(field)
        if duration[index]:
            raise BadDuration(f"{source!r}: {field} given twice")
        if index < last:
            raise BadDuration(f"{source!r}: units go from the largest to the smallest "
                              f"(y, mo, w, d, h, min, s)")
        if float(number) > MAX_DURATION_NUMBER:
            raise BadDuration(f"{source!r}: {number} {field} is too long")
        if field in ("years", "months") and "." in number:
            raise BadDuration(f"{source!r}: {field} are whole numbers on the calendar")
        duration = _with(duration, field, float(number), source)
        last, position = index, match.end()
    return duration


def _with(duration: Duration, field: str, value: float, source: str) -> Duration:
    if field == "seconds":
        field = "seconds_part"
    whole = int(value) if value == int(value) else value
    return duration._replace(**{field: whole})


def parse_seconds(text, bare: str = None, minimum: float = 0.0) -> float:
    """A fixed duration in seconds ("6h", "1d", "90s"); "0" is 0."""
    seconds = parse_duration(text, bare).seconds()
    if seconds < minimum:
        raise BadDuration(f"{text!r} is shorter than {format_seconds(minimum)}")
    return seconds


def format_seconds(seconds: float) -> str:
    """90061 -> '1d1h1min1s': a duration this grammar reads back."""
    rest, parts = float(seconds), []
    for field in ("weeks", "days", "hours", "minutes"):
        count, rest = divmod(rest, _SECONDS[field])
        if count:
            parts.append(f"{count:g}{_SHORT[field]}")
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)


# ---- sizes and rates ------------------------------------------------------------

_SIZE_FACTORS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4,
                 "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4}
_DECIMAL_LOOKING = {"kb": "K", "mb": "M", "gb": "G", "tb": "T"}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_SIZE_EXAMPLES = "such as 64M, 10GiB, 500K or 1.5G"


def parse_size(text, bare: str = "b") -> int:
    """Bytes from "64M", "10GiB", "1.5k", "7 MiB" (powers of 1024).
    bare: the unit of a number written without one ("b" bytes, "m" MiB,
    "k" KiB), None to refuse it. BadSize says what is wrong."""
    if isinstance(text, bool):
        raise BadSize(f"expected a size {_SIZE_EXAMPLES}, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise BadSize(f"a size cannot be negative, got {text!r}")
        if bare is None:
            raise BadSize(f"{text!r} has no unit: write it {_SIZE_EXAMPLES}")
        return int(text * _SIZE_FACTORS[bare])
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise BadSize(f"expected a size {_SIZE_EXAMPLES}, got {text!r}")
    number, unit = match.group(1), match.group(2).lower()
    if unit in _DECIMAL_LOOKING:
        short = _DECIMAL_LOOKING[unit]
        raise BadSize(f"{text.strip()!r}: the unit {match.group(2)!r} is ambiguous (10^3 or "
                      f"2^10 steps?): write '{number}{short}iB' or '{number}{short}' (powers "
                      f"of 1024), or the number of bytes")
    if not unit:
        if bare is None:
            raise BadSize(f"{text.strip()!r} has no unit: write it {_SIZE_EXAMPLES}")
        unit = bare
    if unit not in _SIZE_FACTORS:
        raise BadSize(f"{text.strip()!r}: unknown unit {match.group(2)!r} (B, K, M, G, T or "
                      f"KiB, MiB, GiB, TiB)")
    return int(float(number) * _SIZE_FACTORS[unit])


def parse_rate(text) -> int:
    """Bytes per second from "1MiB/s", "500K", "10M/s" or a bare number of
    KiB/s (512); 0 means no limit."""
    if isinstance(text, str):
        text = re.sub(r"(?i)\s*(/\s*s|ps)\s*$", "", text)
    try:
        return parse_size(text, bare="k")
    except BadSize as err:
        raise BadSize(f"{err} (a rate is a size per second, such as 1MiB/s or 500K; a "
                      f"number alone is KiB/s)") from None


def format_size(count: float) -> str:
    """Bytes as this grammar writes them: 1536 -> '1.5KiB'."""
    for unit, factor in (("TiB", 1024 ** 4), ("GiB", 1024 ** 3), ("MiB", 1024 ** 2),
                         ("KiB", 1024)):
        if count >= factor:
            return f"{count / factor:.4g}{unit}"
    return f"{int(count)}B"


def parse_time_of_day(text) -> tuple:
    """'02:30' -> (2, 30); '24:00' is the end of the day (24, 0)."""
    match = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", str(text))
    if (not match or int(match.group(2)) > 59 or int(match.group(1)) > 24
            or (int(match.group(1)) == 24 and int(match.group(2)))):
        raise UnitError(f"expected a time of day such as \"02:30\", got {text!r}")
    return int(match.group(1)), int(match.group(2))
