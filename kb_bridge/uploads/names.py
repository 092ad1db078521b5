"""Upload ids and file names: the only values from agents that come near a filesystem path."""

from __future__ import annotations

import os
import re
import secrets
import unicodedata

from kb_bridge.errors import InvalidArgument

_ID_RE = re.compile(r"^[0-9a-f]{32}$")
_MAX_NAME_BYTES = 255


def new_upload_id() -> str:
    """128 random bits, hex (a UUID4 has only 122)."""
    return secrets.token_hex(16)


def is_upload_id(value: str) -> bool:
    """Malformed ids are treated as unknown, before any path is built from them."""
    return bool(_ID_RE.fullmatch(value))


def safe_filename(raw: str) -> str:
    """The base name of `raw` with nothing that could steer a path, a header or a terminal.

    Path components (either slash), drive letters, control and format characters (NUL, CR/LF,
    bidi overrides such as U+202E) and quotes are removed; "." and ".." and names that end up
    empty are refused; the result is cut to 255 UTF-8 bytes keeping the extension.
    """
    name = re.split(r"[\\/]", raw)[-1]
    name = re.sub(r"^[A-Za-z]:", "", name)
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C" and c not in "\"'`<>|*?")
    name = name.strip(" .")
    if not name:
        raise InvalidArgument("filename", "must be a file name such as report.pdf")
    stem, ext = os.path.splitext(name)
    while len((stem + ext).encode("utf-8")) > _MAX_NAME_BYTES:
        stem = stem[:-1] if stem else stem
        if not stem:
            ext = ext[: _MAX_NAME_BYTES // 4]
    return stem + ext


def extension(filename: str) -> str:
    return os.path.splitext(filename)[1].lower().lstrip(".")


def check_type(filename: str, extensions: tuple[str, ...], field: str) -> None:
    """InvalidArgument naming `field` unless the engine accepts this file's type (KB_UPLOAD_EXTENSIONS)."""
    if "*" not in extensions and extension(filename) not in extensions:
        raise InvalidArgument(field, f"the engine accepts these file types: {', '.join(extensions)}")
