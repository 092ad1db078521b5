"""`kb-bridge token new NAME --scopes ... [--collections ...]`: a named token for KB_MCP_TOKENS_FILE."""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import sys

from kb_bridge.credentials.named_tokens import NAME_PATTERN, parse_collections, toml_entry
from kb_bridge.credentials.scopes import parse_scopes
from kb_bridge.cli.exits import OK, USAGE, Failed


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def new_token(args: argparse.Namespace) -> int:
    try:
        if not NAME_PATTERN.fullmatch(args.name):
            raise ValueError(f"NAME: {args.name!r} must be 1-64 letters, digits, '.', '_' or '-'")
        scope_list = _items(args.scopes)
        if not scope_list:
            raise ValueError("--scopes: give at least one of kb:read, kb:write, kb:delete")
        parse_scopes(scope_list, "--scopes")
        collection_list = _items(args.collections) if args.collections is not None else None
        if collection_list is not None:
            if not collection_list:
                raise ValueError("--collections: give at least one collection name, or leave the option out for all")
            parse_collections(collection_list, "--collections")
    except ValueError as exc:
        raise Failed(str(exc), USAGE) from None
    token = secrets.token_urlsafe(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    scopes = list(dict.fromkeys(scope_list))
    collections = list(dict.fromkeys(collection_list)) if collection_list is not None else None
    entry = toml_entry(args.name, digest, scopes, collections)
    if args.json:
        print(json.dumps({"name": args.name, "token": token, "sha256": digest, "scopes": scopes,
                          "collections": collections, "toml": entry}))
        return OK
    # stdout holds exactly the token, a blank line and the entry (easy to script); the guidance goes to stderr.
    print(f"The first line is the token for {args.name}: give it to the agent now, it is not stored and not "
          "shown again. Paste the [[token]] entry into the file KB_MCP_TOKENS_FILE points at and restart "
          "the bridge.", file=sys.stderr)
    print(f"{token}\n\n{entry}", end="")
    return OK
