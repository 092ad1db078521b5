"""`since`, `until` and `time_field` of kb_search and kb_list, turned into the engine's time bounds
(docs/engine-api.md, engine 3.8: `created_after`, `created_before`, `updated_after`, `updated_before`).

A value is an ISO 8601 date or date-time (UTC when it has no offset) or a span back from now (`30m`, `36h`,
`7d`, `2w`). `since` is inclusive and `until` exclusive, as the engine's bounds are; a bare date in `until`
means the end of that day, so `since=2026-04-01, until=2026-04-30` is the whole of April 1 to 30. Stored times
are whole milliseconds; a bound finer than that is rounded up (iso).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

from kb_bridge.errors import InvalidArgument

FIELDS = ("created", "updated")
BOUNDS = ("created_after", "created_before", "updated_after", "updated_before")
_SPAN = re.compile(r"(\d{1,7})([mhdw])", re.ASCII)  # ASCII digits, as every number the tools take
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?")
# The first and latest instants the engine writes (four-digit years, milliseconds): the end of 9999-12-31 as
# an until, which is the day after and would overflow, and a time whose offset takes it past either end in UTC.
FIRST = datetime(1, 1, 1, tzinfo=timezone.utc)
LAST = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
FORMS = "an ISO 8601 date or date-time (e.g. 2026-04-01 or 2026-04-01T09:30:00Z) or a span back from now " \
        "(30m, 36h, 7d, 2w)"


def moment(value: str, field: str, now: datetime, end_of_day: bool = False) -> datetime:
    """The instant `value` names (UTC-aware); InvalidArgument naming `field` otherwise."""
    text = value.strip()
    try:
        span = _SPAN.fullmatch(text)
        if span:
            return now - timedelta(**{_UNITS[span.group(2)]: int(span.group(1))})
        if _DATE.fullmatch(text):
            day = datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
            if not end_of_day:
                return day
            return day + timedelta(days=1) if day.date() < date.max else LAST
        stamp = text.upper()  # RFC 3339 (5.6) allows a lower-case T and Z
        if _DATE_TIME.fullmatch(stamp):
            found = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            return _utc(found) if found.tzinfo is not None else found.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        raise InvalidArgument(field, f"{value[:60]!r} is not a real date, time or span") from None
    raise InvalidArgument(field, f"must be {FORMS}")


def _utc(instant: datetime) -> datetime:
    """`instant` in UTC; one whose offset takes it before the year 1 or after 9999 there (0001-01-01T00:00+14:00)
    is the first or last instant the engine stores, which bounds exactly the same documents."""
    try:
        return instant.astimezone(timezone.utc)
    except OverflowError:
        return FIRST if instant.year == 1 else LAST


def iso(instant: datetime) -> str:
    """The engine's form of a bound, rounded up to its millisecond: stored times are whole milliseconds, so a
    since of …57.2485 must leave out a note of …57.248 and an until of …57.2481 must keep it (truncating did
    the opposite of both)."""
    utc = instant.astimezone(timezone.utc)
    if utc.microsecond % 1000:
        utc = LAST if utc > LAST else utc + timedelta(microseconds=1000 - utc.microsecond % 1000)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def engine_bounds(since: str | None, until: str | None, time_field: str,
                  now: datetime | None = None) -> dict[str, str]:
    """The engine's bounds for these arguments ({} when neither is given)."""
    if time_field not in FIELDS:
        raise InvalidArgument("time_field", f"must be one of {', '.join(FIELDS)}")
    now = now or datetime.now(timezone.utc)
    bounds: dict[str, str] = {}
    start = moment(since, "since", now) if since is not None else None
    end = moment(until, "until", now, end_of_day=True) if until is not None else None
    if start is not None and end is not None and start > end:
        raise InvalidArgument("since", f"is later than until ({iso(start)} > {iso(end)})")
    if start is not None:
        bounds[f"{time_field}_after"] = iso(start)
    if end is not None:
        bounds[f"{time_field}_before"] = iso(end)
    return bounds
