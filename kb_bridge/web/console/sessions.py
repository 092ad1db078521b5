"""Server-side console sessions, shared by every worker: a random id in an HttpOnly cookie names a record
that holds the principal and the session's CSRF token. Signing out deletes the record, so the old cookie
opens nothing any more (revocable, unlike a signed cookie).

Records live where the upload store lives: files in a directory beside the staged uploads (all workers on
a host), or Redis when KB_UPLOAD_STORE is a Redis URL (all replicas). Record names are digests of the ids,
so a directory listing or a Redis scan reveals no usable cookie.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kb_bridge.auth.principal import Principal
from kb_bridge.settings import Settings

SESSION_SECONDS = 8 * 3600


@dataclass(frozen=True)
class Session:
    id: str
    principal: Principal
    csrf: str
    expires: float

    def to_json(self) -> str:
        p = self.principal
        return json.dumps({"name": p.name, "scopes": sorted(p.scopes), "kind": p.kind,
                           "collections": sorted(p.collections) if p.collections is not None else None,
                           "csrf": self.csrf, "expires": self.expires})

    @classmethod
    def from_json(cls, session_id: str, raw: str | bytes) -> Session:
        data: dict[str, Any] = json.loads(raw)
        collections = data["collections"]
        principal = Principal(data["name"], scopes=frozenset(data["scopes"]), kind=data["kind"],
                              collections=frozenset(collections) if collections is not None else None)
        return cls(session_id, principal, data["csrf"], float(data["expires"]))


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

    def put(self, key: str, value: str, seconds: float) -> None:
        self._redis.set(f"kb-bridge:console:{key}", value, ex=max(1, int(seconds)))

    def get(self, key: str) -> bytes | None:
        found = self._redis.get(f"kb-bridge:console:{key}")
        return found if isinstance(found, bytes) else None

    def delete(self, key: str) -> None:
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

    def start(self, principal: Principal) -> Session:
        session = Session(secrets.token_urlsafe(32), principal, secrets.token_urlsafe(32), self._clock() + SESSION_SECONDS)
        self._store.put(self._key(session.id), session.to_json(), SESSION_SECONDS)
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
