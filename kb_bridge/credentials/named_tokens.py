"""KB_MCP_TOKENS_FILE: named static tokens with scopes and collections, for teams without an
authorization server.

    [[token]]
    name = "research-agent"          # appears in logs; letters, digits, '.', '_' or '-'
    sha256 = "<64 hex digits>"        # of the token; the token itself is never stored
    scopes = ["kb:read"]
    collections = ["documents"]       # optional: the only collections this token sees

Read once at start by the settings reader; any bad entry stops the bridge with a message naming the
entry (its position and, when it has one, its name), and so does a file that group or others can write
(they could add a token). `kb-bridge token new` prints entries in this form.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kb_bridge import collection_tags as collection_names
from kb_bridge.credentials.scopes import parse_scopes
from kb_bridge.errors import InvalidArgument

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_KEYS = {"name", "sha256", "scopes", "collections"}


@dataclass(frozen=True)
class NamedToken:
    name: str
    sha256: bytes  # the digest itself (32 bytes)
    scopes: frozenset[str]
    collections: frozenset[str] | None  # None: every collection


def parse_collections(values: Iterable[str], where: str) -> frozenset[str]:
    """Collection names, each valid; ValueError naming `where` otherwise (auth/oauth.py checks a JWT's claim with it too)."""
    names = set()
    for value in values:
        try:
            names.add(collection_names.check_name(value))
        except InvalidArgument as exc:
            raise ValueError(f"{where}: {value!r} is not a collection name ({exc.message})") from None
    return frozenset(names)


def load_tokens_file(path: str) -> tuple[NamedToken, ...]:
    """The entries of a tokens file; ValueError with a readable reason for anything wrong in it, or when
    anyone but its owner could write it."""
    try:
        with open(path, "rb") as file:
            # The mode of the file as opened (through any symlink): nothing can swap it between check and read.
            _check_mode(path, os.fstat(file.fileno()).st_mode)
            text = file.read().decode("utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise ValueError(f"no such file: {path}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"token"}
    if unknown:
        raise ValueError(f"unexpected top-level key(s) {', '.join(sorted(unknown))}: expected [[token]] entries only")
    entries = data.get("token", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("expected [[token]] tables")
    tokens = tuple(_entry(entry, number) for number, entry in enumerate(entries, start=1))
    _check_unique(tokens)
    return tokens


def _check_mode(path: str, mode: int) -> None:
    """Whoever can write the file can add a token with every scope: only its owner may. Reading is harmless
    (the file holds digests, not tokens), so a group that only reads it (0640) is fine."""
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(
            f"{path} is writable by group or others (mode {stat.S_IMODE(mode):04o}): anyone who can write it can add "
            "a token; use a file only its owner can write (chmod 600, or 640 for a group that reads it)"
        )


def _entry(entry: dict[str, Any], number: int) -> NamedToken:
    name = entry.get("name")
    where = f"token #{number}" + (f" ({name!r})" if isinstance(name, str) and name else "")
    extra = set(entry) - _KEYS
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(_KEYS))})")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{where}: name must be 1-64 letters, digits, '.', '_' or '-'")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise ValueError(f"{where}: sha256 must be the 64 hex digits of the token's SHA-256 (kb-bridge token new prints it)")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
        raise ValueError(f"{where}: scopes must be a non-empty list such as [\"kb:read\"]")
    limited = entry.get("collections")
    if limited is not None and (not isinstance(limited, list) or not limited or not all(isinstance(c, str) for c in limited)):
        raise ValueError(f"{where}: collections must be a non-empty list of collection names, or left out for all")
    return NamedToken(
        name=name,
        sha256=bytes.fromhex(digest),
        scopes=parse_scopes(scopes, where),
        collections=parse_collections(limited, where) if limited is not None else None,
    )


def _check_unique(tokens: tuple[NamedToken, ...]) -> None:
    names: set[str] = set()
    digests: set[bytes] = set()
    for number, token in enumerate(tokens, start=1):
        where = f"token #{number} ({token.name!r})"
        if token.name in names:
            raise ValueError(f"{where}: the name is used by an earlier entry; names must be unique (they name callers in the logs)")
        if token.sha256 in digests:
            raise ValueError(f"{where}: the same token (sha256) is listed twice")
        names.add(token.name)
        digests.add(token.sha256)


def toml_entry(name: str, sha256_hex: str, scopes: Iterable[str], collections: Iterable[str] | None) -> str:
    """The [[token]] entry for a token, as `kb-bridge token new` prints it."""
    def listed(values: Iterable[str]) -> str:
        return "[" + ", ".join(f'"{v}"' for v in values) + "]"

    lines = ["[[token]]", f'name = "{name}"', f'sha256 = "{sha256_hex}"', f"scopes = {listed(scopes)}"]
    if collections is not None:
        lines.append(f"collections = {listed(collections)}")
    return "\n".join(lines) + "\n"
