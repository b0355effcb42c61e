"""argparse types for flud's one grammar of durations, sizes and rates
(flud/units.py): the option's error is the grammar's own message."""
import argparse

from flud import units


def size_arg(bare: str = "b"):
    """A size; a bare number is in `bare` ("b" bytes, "m" MiB)."""
    def size(text):
        return _as_argument(units.parse_size, text, bare)
    return size


def rate_arg(text) -> int:
    """A rate in bytes/s ("1MiB/s", "500K", a bare number of KiB/s)."""
    return _as_argument(units.parse_rate, text)


def seconds_arg(bare: str = None, minimum: float = 0.0, why: str = ""):
    """A fixed duration in seconds; a bare number is in `bare` ("s")."""
    def duration(text):
        seconds = _as_argument(units.parse_seconds, text, bare)
        if seconds < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is less than {units.format_seconds(minimum)}"
                + (f": {why}" if why else ""))
        return seconds
    return duration


def duration_text(text) -> str:
    """A duration checked at parse time, kept as written (a calendar one
    such as --keep-within's, read again where it is applied)."""
    _as_argument(units.parse_duration, text)
    return text


def _as_argument(parser, *args):
    try:
        return parser(*args)
    except units.UnitError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
