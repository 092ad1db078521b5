"""Who is calling: the principal a request acts as, made once per request by the auth layer and passed
to handlers explicitly (never read from a global).

A principal has a name that is safe to log (a static token's caller id; later a token's configured
name or an OAuth subject), the scopes it holds, and the collections it is limited to (None: all).
Its `owner` names what it owns in shared stores (uploads, tasks): a short, path-safe id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kb_bridge.credentials.scopes import DELETE, READ, WRITE
from kb_bridge.credentials.secret import Secret

# Where the HTTP auth middleware leaves the principal for the MCP layer (an ASGI scope key).
SCOPE_KEY = "kb.principal"

__all__ = ["ALL_SCOPES", "ANONYMOUS", "LOCAL", "SCOPE_KEY", "Principal", "caller_id", "principal_of"]

ALL_SCOPES = frozenset({READ, WRITE, DELETE})

_SAFE_OWNER = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Principal:
    name: str
    scopes: frozenset[str] = ALL_SCOPES
    collections: frozenset[str] | None = None
    # What kind of credential made it ("local", "anonymous", "api_key", ...): for logs, never a secret.
    kind: str = "api_key"
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def owner(self) -> str:
        """The id that owns uploads and tasks. The bridge's key is owned by its caller id (16 hex digits).
        Every other principal is owned by a digest (32 hex digits) of its kind and identity, so no name a
        token is given can equal another kind's owner: a tokens-file entry named "local" owned what the
        stdio user (LOCAL) staged in the same KB_UPLOAD_DIR, one named like a caller id the key's uploads.
        A tokens-file entry is one configured entry, its identity its name. An OAuth subject may hold several
        tokens with different scopes and collections (one per client: README, "Authorization"), so it owns
        by subject and authority together: a token limited to one collection never finishes, reads or
        cancels what a wider token of the same subject started."""
        if self.kind == "api_key" and _SAFE_OWNER.fullmatch(self.name):
            return self.name
        identity = self.name
        if self.kind == "oauth":
            collections = None if self.collections is None else sorted(self.collections)
            identity = json.dumps([self.name, sorted(self.scopes), collections])
        return hashlib.sha256(f"{self.kind}:{identity}".encode("utf-8", "surrogateescape")).hexdigest()[:32]

    @property
    def display_name(self) -> str:
        """Who this is, for a person to read: a named token's name, a JWT's subject, "API key" for the
        bridge's own key (whose `name` is a digest, kept for logs and upload ownership)."""
        return {"api_key": "API key", "local": "local user"}.get(self.kind, self.name)

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def limited(self) -> bool:
        """True when the principal sees only some collections."""
        return self.collections is not None

    def sees(self, collection: str | None) -> bool:
        """Whether a document in `collection` exists for this principal (one without a collection
        tag, written by another client, belongs to no collection and is seen only by the unlimited)."""
        return self.collections is None or (collection is not None and collection in self.collections)


# stdio and in-process clients: the local user, with every right.
LOCAL = Principal("local", kind="local")
# HTTP without any auth configured (loopback only, warned about at start).
ANONYMOUS = Principal("anonymous", kind="anonymous")


def caller_id(key: Secret) -> str:
    """A stable, non-secret id for a static token: names its uploads and appears in logs.

    PBKDF2 rather than a bare hash, so a logged id does not help anyone guess a weak key offline;
    computed once per configured key at start-up.
    """
    return hashlib.pbkdf2_hmac("sha256", key.reveal().encode(), b"kb-bridge caller id", 50_000)[:8].hex()


def principal_of(scope: Mapping[str, Any] | None) -> Principal:
    """The principal the auth middleware put on an HTTP request; requests without one are local."""
    if scope is not None:
        found = scope.get(SCOPE_KEY)
        if isinstance(found, Principal):
            return found
    return LOCAL
