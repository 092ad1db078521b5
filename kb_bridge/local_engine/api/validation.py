"""Reading and checking request input. Every failure names the field: 400 for a body that is not JSON
at all, 422 for a JSON body or query parameter with a wrong type or value.

No string the engine takes may hold U+0000 (NUL): PostgreSQL's text columns cannot store it, and one rule
on both stores means a client never sees a note taken on SQLite and refused (or a 500) on PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from flask import request
from werkzeug.exceptions import BadRequest as WerkzeugBadRequest

from kb_bridge import json_values

from ..clock import parse_iso
from ..errors import BadRequest, UnsupportedMediaType, ValidationError
from .times import timestamp

MAX_TAG_CHARS = 200
MAX_TAGS = 100
MAX_TITLE_CHARS = 1000
MAX_PATH_CHARS = 4096
MAX_CHANGED_BY_CHARS = 200
# JSON values (arrays, objects and their members) one body may hold, counted before it is parsed
# (kb_bridge/json_values.py). The largest a request needs is PUT .../versions: 10,000 versions of 100 tags,
# about 1.07 million.
MAX_JSON_VALUES = 2_000_000


def json_object(max_bytes: int) -> dict[str, Any]:
    """The request body as a JSON object. Only `application/json` (a charset is fine): `text/plain` and
    form bodies are what a web page can send cross-site without a preflight (api/guard.py), so they are 415."""
    if request.mimetype != "application/json":
        raise UnsupportedMediaType("send the body as JSON with Content-Type: application/json")
    request.max_content_length = max_bytes
    if json_values.more_than(request.get_data(cache=True), MAX_JSON_VALUES):
        raise BadRequest(f"the request body holds more than {MAX_JSON_VALUES} JSON values (arrays, objects and "
                         "their members)")
    try:
        body = request.get_json(force=True, silent=False, cache=True)
    except WerkzeugBadRequest:
        raise BadRequest("the request body is not valid JSON") from None
    except RecursionError:  # arrays or objects nested thousands deep; Werkzeug catches only ValueError
        raise BadRequest("the request body nests too deeply to be read as JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    _check_unicode(body)
    return body


def _check_unicode(body: dict[str, Any]) -> None:
    """422 naming the first string (key or value) that holds a lone surrogate: JSON can escape one
    ("\\udcff", bytes that were not UTF-8 decoded with surrogateescape) but no store can encode it as
    UTF-8. Checked once here, so every field, nested ones too, is covered before anything encodes it
    (json_values.strings: memory grows with the depth, not with the values)."""
    for keys, text, is_key in json_values.strings(body):
        if not _encodable(text):
            if is_key:
                raise ValidationError("a field name in the request body holds a lone surrogate (U+D800-U+DFFF)")
            raise ValidationError(f"{json_values.path(keys)} must be Unicode text: it holds a lone surrogate (U+D800-U+DFFF)",
                                  field=json_values.path(keys))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def string(
    body: Mapping[str, Any], name: str, *, required: bool = False, max_chars: int | None = None,
    allow_blank: bool = False,
) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ValidationError(f"{name} is required", field=name)
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    if not allow_blank and not value.strip():
        raise ValidationError(f"{name} must not be empty", field=name)
    if max_chars is not None and len(value) > max_chars:
        raise ValidationError(f"{name} must be at most {max_chars} characters", field=name)
    return no_nul(value, name)


def no_nul(value: str, name: str) -> str:
    if "\x00" in value:
        raise ValidationError(f"{name} must not contain the NUL character (U+0000)", field=name)
    return value


def integer(body: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.0 from a client that writes every number as a float
    # bool is an int in Python; `true` is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer", field=name)
    if not low <= value <= high:
        raise ValidationError(f"{name} must be between {low} and {high}", field=name)
    return value


def boolean(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be true or false", field=name)
    return value


def choice(body: Mapping[str, Any], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = body.get(name, default)
    if value is None:
        return default
    if value not in choices:
        raise ValidationError(f"{name} must be one of {', '.join(choices)}", field=name)
    return str(value)


def tags(value: Any, name: str = "tags") -> tuple[str, ...]:
    """A list of tags: strings of 1–200 characters; duplicates dropped, order kept."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationError(f"{name} must be a list of strings", field=name)
    if len(value) > MAX_TAGS:
        raise ValidationError(f"{name} may hold at most {MAX_TAGS} tags", field=name)
    for tag in value:
        check_tag(tag, name)
    return tuple(dict.fromkeys(value))


def check_tag(tag: Any, name: str = "tag") -> str:
    if not isinstance(tag, str) or not tag.strip():
        raise ValidationError(f"{name}: every tag must be a non-empty string", field=name)
    if len(tag) > MAX_TAG_CHARS:
        raise ValidationError(f"{name}: a tag may have at most {MAX_TAG_CHARS} characters", field=name)
    if any(ord(c) < 32 for c in tag):
        raise ValidationError(f"{name}: a tag must not contain control characters", field=name)
    return tag


def form_tags(values: list[str]) -> tuple[str, ...]:
    """Multipart `tags`: repeated fields, or one field holding a JSON array."""
    if len(values) == 1 and values[0].lstrip().startswith("["):
        try:
            return tags(json.loads(values[0]))
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nested thousands deep
            raise ValidationError("tags: the field looks like a JSON array but is not valid JSON", field="tags") from None
    return tags(values)


def arg_tags(name: str = "tag") -> tuple[str, ...]:
    """A repeatable tag query parameter (`?tag=a&tag=b`: all must match), duplicates dropped, order kept."""
    return tuple(check_tag(tag, name) for tag in dict.fromkeys(request.args.getlist(name)))


def arg_string(name: str) -> str | None:
    """A text query parameter, None when absent or empty."""
    text = request.args.get(name)
    return no_nul(text, name) if text else None


def arg_int(name: str, default: int, low: int, high: int) -> int:
    """A query parameter's whole number; absent or empty is `default`."""
    text = request.args.get(name)
    if text is None or text == "":
        return default
    return query_number(name, text, low, high)


def query_number(name: str, text: str, low: int, high: int, field: str | None = None) -> int:
    """A whole number written in ASCII digits, within [low, high]. int() alone would also take "+3", " 3 " and
    other scripts' digits ("٣"), and str.isdigit takes "²", which int() refuses."""
    if not (text.isascii() and text.isdigit()):
        raise ValidationError(f"{name} must be an integer", field=field or name)
    digits = text.lstrip("0") or "0"  # so that int() is never asked for more digits than `high` has
    if len(digits) > len(str(high)) or not low <= int(digits) <= high:
        raise ValidationError(f"{name} must be between {low} and {high}", field=field or name)
    return int(digits)


def page_args(default_limit: int = 50, max_limit: int = 500) -> tuple[int, int]:
    """`limit` and `offset` of a listing."""
    return arg_int("limit", default_limit, 1, max_limit), arg_int("offset", 0, 0, 1 << 62)


# A stored time in the API's form (clock.py), or as engines before it wrote it (no milliseconds): UTC with
# `Z`, ASCII digits only. Any fraction up to microseconds: the same form kb-bridge checks its cursors' times by.
_STORED_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z")


def listing_key(name: str) -> tuple[str, int] | None:
    """`<updated_at>,<id>` of a document a listing answered (engine 3.14): the page starts after it. None when
    absent or empty. The time stays as given, not normalised: the listing compares it, as text, with the
    stored times it sorts by, and those are what it answered, so only their form is taken."""
    text = request.args.get(name)
    if not text:
        return None
    stamp, comma, ident = text.rpartition(",")
    if not comma or not _STORED_TIME.fullmatch(stamp):
        raise ValidationError(f"{name} must be <updated_at>,<id> of a listed document, e.g. 2026-04-01T08:00:00.000Z,42", field=name)
    try:
        parse_iso(stamp, name)
    except ValidationError:
        raise ValidationError(f"{name} holds a time that does not exist: {stamp!r}", field=name) from None
    return stamp, query_number(f"{name}'s id", ident, 1, 2**63 - 1, field=name)


def arg_bool(name: str, default: bool) -> bool:
    text = request.args.get(name)
    if text is None or text == "":
        return default
    lowered = text.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValidationError(f"{name} must be true or false", field=name)


def changed_by(body: Mapping[str, Any]) -> str | None:
    """`changed_by`: who asks for a change, as the client names them (kept with the version it makes)."""
    return string(body, "changed_by", max_chars=MAX_CHANGED_BY_CHARS)


MAX_VERSIONS = 10_000


def versions(value: Any) -> list[dict[str, Any]]:
    """`versions`: a note's earlier versions, each {version, title, text, tags, updated_at, changed_by?}."""
    if not isinstance(value, list) or len(value) > MAX_VERSIONS:
        raise ValidationError(f"versions must be a list of at most {MAX_VERSIONS} versions", field="versions")
    checked: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"versions[{index}]"
        if not isinstance(item, dict):
            raise ValidationError(f"{where} must be an object", field=where)
        number = item.get("version")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 2**31 - 2:
            raise ValidationError(f"{where}.version must be a positive integer", field=f"{where}.version")
        try:
            checked.append({
                "version": number,
                "title": string(item, "title", required=True, max_chars=MAX_TITLE_CHARS),
                "text": string(item, "text", required=True),
                "tags": list(tags(item.get("tags"))),
                "updated_at": timestamp(item, "updated_at", required=True),
                "changed_by": changed_by(item),
            })
        except ValidationError as exc:
            raise ValidationError(f"{where}.{exc.message}", field=f"{where}.{exc.field}" if exc.field else where) from None
    if len({item["version"] for item in checked}) != len(checked):
        raise ValidationError("versions: each version number may appear once", field="versions")
    return checked
