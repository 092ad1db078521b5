"""Timestamps as the API shows them: ISO-8601 UTC with `Z`, millisecond precision.

One fixed-width format means the strings sort like the instants they name, so SQLite compares them as text.
"""

from __future__ import annotations

import datetime as dt

from .errors import ValidationError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def now_iso() -> str:
    return format_iso(dt.datetime.now(dt.timezone.utc))


def format_iso(moment: dt.datetime) -> str:
    """Every year in four digits: strftime's %Y writes year 999 as "999" on Linux (glibc), which neither
    sorts with the rest nor parses back (fromisoformat wants four digits)."""
    moment = moment.astimezone(dt.timezone.utc)
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def parse_iso(text: str, name: str) -> str:
    """A client's timestamp (`Z` or an offset; a bare date or naive time is taken as UTC), normalised."""
    try:
        return format_iso(_moment(text))
    except (ValueError, OverflowError):  # OverflowError: an offset that moves year 1 or 9999 out of range
        raise ValidationError(f"{name} must be an ISO-8601 timestamp, got {text[:60]!r}", field=name) from None


def parse_bound(text: str, name: str) -> str:
    """A client's time bound, normalised as parse_iso does but with a part of a millisecond rounded up, not
    cut: stored times are whole milliseconds, so `t >= bound` and `t < bound` then hold for exactly the
    times they hold for unrounded (cut, a document at .000 passed `*_after=.0005` and failed `*_before=.0005`).
    The last millisecond of year 9999 has no later one to round to and stays as it is."""
    try:
        moment = _moment(text)
        if moment.microsecond % 1000:
            try:
                moment += dt.timedelta(microseconds=1000 - moment.microsecond % 1000)
            except OverflowError:
                pass
        return format_iso(moment)
    except (ValueError, OverflowError):
        raise ValidationError(f"{name} must be an ISO-8601 timestamp, got {text[:60]!r}", field=name) from None


def epoch_millis(stamp: str) -> int:
    """Milliseconds since 1970 of a stored timestamp (this format, or the same without milliseconds), for
    indexes that compare instants as numbers (store/text_index.py)."""
    return (_moment(stamp) - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: no float in between


def _moment(text: str) -> dt.datetime:
    """An ISO-8601 timestamp as an aware datetime; without an offset it is UTC."""
    moment = dt.datetime.fromisoformat(text.strip())
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def seconds_ago_iso(seconds: float) -> str:
    return format_iso(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds))
