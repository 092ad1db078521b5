"""Server-side console sessions, shared by every worker: a random id in an HttpOnly cookie names a record
that holds the principal, the session's CSRF token and the token it signed in with. Signing out deletes the
record, so the old cookie opens nothing any more (revocable, unlike a signed cookie).

The token is kept so that every request can ask the authenticator again (web/console/validity.py): a token
removed from KB_MCP_TOKENS_FILE or an expired JWT ends its session at the next request. It is sealed
(AES-GCM) with a key derived from the session id, which only the cookie holds: a record read from the
directory or from Redis yields no usable token. A session lasts SESSION_SECONDS at most, and never past its
token's expiry.

Records live where the upload store lives: files in a directory beside the staged uploads (all workers on
a host), or Redis when KB_UPLOAD_STORE is a Redis URL (all replicas). Record names are digests of the ids,
so a directory listing or a Redis scan reveals no usable cookie.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kb_bridge.auth.principal import Principal
from kb_bridge.errors import StorageError
from kb_bridge.settings import Settings

logger = logging.getLogger(__name__)

SESSION_SECONDS = 8 * 3600


@dataclass(frozen=True)
class Session:
    id: str
    principal: Principal
    csrf: str
    expires: float
    sealed_token: str | None = None  # None: signed in without a token (a bridge without auth)

    def token(self) -> bytes | None:
        """The token the session signed in with, or None (none, or a record that does not open)."""
        return _unseal(self.id, self.sealed_token) if self.sealed_token is not None else None

    def to_json(self) -> str:
        p = self.principal
        return json.dumps({"name": p.name, "scopes": sorted(p.scopes), "kind": p.kind,
                           "collections": sorted(p.collections) if p.collections is not None else None,
                           "csrf": self.csrf, "expires": self.expires, "token": self.sealed_token})

    @classmethod
    def from_json(cls, session_id: str, raw: str | bytes) -> Session:
        data: dict[str, Any] = json.loads(raw)
        collections = data["collections"]
        principal = Principal(data["name"], scopes=frozenset(data["scopes"]), kind=data["kind"],
                              collections=frozenset(collections) if collections is not None else None)
        sealed = data.get("token")
        return cls(session_id, principal, data["csrf"], float(data["expires"]), sealed if isinstance(sealed, str) else None)


_SEAL_LABEL = b"kb-bridge console token\0"
_NONCE_BYTES = 12


def _seal_key(session_id: str) -> bytes:
    # Another digest of the id than the record's name (Sessions._key): the name does not give the key.
    return hashlib.sha256(_SEAL_LABEL + session_id.encode("utf-8", "surrogateescape")).digest()


def _seal(session_id: str, token: bytes) -> str:
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return base64.urlsafe_b64encode(nonce + AESGCM(_seal_key(session_id)).encrypt(nonce, token, None)).decode("ascii")


def _unseal(session_id: str, sealed: str) -> bytes | None:
    try:
        raw = base64.urlsafe_b64decode(sealed.encode("ascii"))
        return AESGCM(_seal_key(session_id)).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], None)
    except (InvalidTag, ValueError, binascii.Error):
        return None


class SessionStore(Protocol):
    def put(self, key: str, value: str, seconds: float) -> None: ...

    def get(self, key: str) -> str | bytes | None: ...

    def delete(self, key: str) -> None: ...


class DirectorySessions:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def put(self, key: str, value: str, seconds: float) -> None:
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self._dir / f".{key}.{os.getpid()}"
        temporary.write_text(value, encoding="utf-8")
        os.chmod(temporary, 0o600)
        os.replace(temporary, self._dir / key)
        self._sweep()

    def get(self, key: str) -> str | None:
        try:
            return (self._dir / key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        (self._dir / key).unlink(missing_ok=True)

    def _sweep(self) -> None:
        """Expired records go when a new one is written (sign-ins are rare; this stays cheap)."""
        now = time.time()
        for path in self._dir.iterdir():
            try:
                if not path.name.startswith(".") and json.loads(path.read_text(encoding="utf-8"))["expires"] < now:
                    path.unlink(missing_ok=True)
            except (OSError, ValueError, KeyError):
                continue


class RedisSessions:
    def __init__(self, url: str) -> None:
        import redis  # the optional extra, present whenever KB_UPLOAD_STORE is Redis

        self._redis = redis.Redis.from_url(url)
        self._failure: type[Exception] = redis.RedisError

    @contextlib.contextmanager
    def _reached(self) -> Iterator[None]:
        """Redis unreachable is the staging area failing (the console's error page, 502, as any KbError), not
        an internal error: the page says what failed, and the log says why without the URL's password."""
        try:
            yield
        except self._failure as exc:
            logger.warning("console sessions: Redis failed (%s)", type(exc).__name__)
            raise StorageError("the console's session store (Redis) cannot be reached; try again shortly") from None

    def put(self, key: str, value: str, seconds: float) -> None:
        with self._reached():
            self._redis.set(f"kb-bridge:console:{key}", value, ex=max(1, int(seconds)))

    def get(self, key: str) -> bytes | None:
        with self._reached():
            found = self._redis.get(f"kb-bridge:console:{key}")
        return found if isinstance(found, bytes) else None

    def delete(self, key: str) -> None:
        with self._reached():
            self._redis.delete(f"kb-bridge:console:{key}")


class Sessions:
    def __init__(self, store: SessionStore, clock: Any = time.time) -> None:
        self._store = store
        self._clock = clock

    @classmethod
    def for_settings(cls, settings: Settings) -> Sessions:
        if settings.uploads.store_url is not None:
            return cls(RedisSessions(settings.uploads.store_url))
        return cls(DirectorySessions(Path(settings.uploads.dir) / "console-sessions"))

    @staticmethod
    def _key(session_id: str) -> str:
        return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()

    def start(self, principal: Principal, token: bytes | None, token_expires: float | None = None) -> Session:
        """A new session for `principal`, signed in with `token`; it ends after SESSION_SECONDS or at
        `token_expires` (a JWT's exp), whichever comes first."""
        now = self._clock()
        expires = now + SESSION_SECONDS if token_expires is None else min(now + SESSION_SECONDS, token_expires)
        session_id = secrets.token_urlsafe(32)
        sealed = _seal(session_id, token) if token is not None else None
        session = Session(session_id, principal, secrets.token_urlsafe(32), expires, sealed)
        self._store.put(self._key(session.id), session.to_json(), expires - now)
        return session

    def find(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 100:
            return None
        raw = self._store.get(self._key(session_id))
        if raw is None:
            return None
        try:
            session = Session.from_json(session_id, raw)
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > self._clock() else None

    def end(self, session_id: str) -> None:
        self._store.delete(self._key(session_id))
