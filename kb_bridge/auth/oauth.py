"""The bridge as an OAuth 2.1 resource server: access tokens are JWTs from KB_OAUTH_ISSUER, checked
against the issuer's published keys (PyJWT does the cryptography; nothing here signs or verifies by hand).

Keys are found once through the issuer's metadata (RFC 8414 `/.well-known/oauth-authorization-server`,
else OpenID Connect discovery), or at KB_OAUTH_JWKS_URL, and cached. A token signed with a key id the cache
does not know makes the cache fetch the key set again, at most once per REFETCH_INTERVAL whatever the number
of such tokens (a burst of forged kids cannot turn the bridge into a load generator against the issuer), so
a newly published key is accepted within seconds; the set is also refreshed every REFRESH_AFTER.

Only asymmetric algorithms are accepted: a token saying `none` or HS256 is refused before any key is
looked at, so a public key can never be used as an HMAC secret. `iss` must equal the issuer, `aud` (a string
or a list) must contain the resource, `exp` is required; `exp` and `nbf` get LEEWAY seconds of clock skew.

An issuer that cannot be reached leaves the door shut: every OAuth token is refused (and the reason
logged, with the retries) until its keys can be fetched; static tokens keep working.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import jwt
import requests

from kb_bridge.auth.principal import Principal
from kb_bridge.credentials.named_tokens import parse_collections
from kb_bridge.credentials.scopes import KNOWN_SCOPES
from kb_bridge.environment import is_loopback_host
from kb_bridge.settings import OAuthSettings

logger = logging.getLogger(__name__)

ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
LEEWAY = 60
REFETCH_INTERVAL = 10.0
REFRESH_AFTER = 600.0
FETCH_TIMEOUT = (3.0, 5.0)
MAX_DOCUMENT_BYTES = 1024 * 1024
# Metadata and key sets are fetched through at most this many redirects (each checked: _redirect_target).
MAX_REDIRECTS = 3
COLLECTIONS_CLAIM = "kb_collections"
# The longest principal name (the engine keeps `changed_by` to 200 characters).
MAX_NAME = 200


class InvalidToken(Exception):
    """A token the bridge will not accept; `reason` is a short label for logs and metrics, never the token."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def looks_like_jwt(token: bytes) -> bool:
    """Three base64url segments: worth handing to the JWT check (static tokens never look like this)."""
    return token.count(b".") == 2 and len(token) <= 16 * 1024


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be: RFC 8414 (the well-known path inserted before the issuer's
    path), then OpenID Connect discovery (appended to the issuer)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    rfc8414 = urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-authorization-server" + path, "", ""))
    oidc = issuer.rstrip("/") + "/.well-known/openid-configuration"
    return [rfc8414, oidc]


def _secure(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname))


@dataclass
class _KeySet:
    keys: dict[str | None, jwt.PyJWK]
    fetched_at: float


class OAuthVerifier:
    """Turns an access token into a Principal, or raises InvalidToken. Thread-safe; fetches happen on the
    calling thread (the HTTP door calls it from a worker thread, never on the event loop)."""

    def __init__(self, settings: OAuthSettings, fetch: Callable[[str], dict[str, Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert settings.issuer is not None
        self._issuer = settings.issuer
        self._audience = settings.expected_audience
        self._jwks_url = settings.jwks_url
        self._fetch = fetch or _fetch_json
        self._clock = clock
        self._keys: _KeySet | None = None
        self._lock = threading.Lock()
        self._last_attempt: float | None = None
        self._failing = False

    # --- the key set --------------------------------------------------------------------------

    def prime(self) -> bool:
        """Fetch the keys now (at start), so that a problem is logged before the first request; whether
        the bridge has keys now."""
        with self._lock:
            self._refresh_locked()
            return self._keys is not None

    def _key_for(self, kid: str | None) -> jwt.PyJWK | None:
        current = self._keys
        now = self._clock()
        if current is not None and kid in current.keys and now - current.fetched_at < REFRESH_AFTER:
            return current.keys[kid]
        with self._lock:
            current = self._keys
            # Another thread may have fetched while this one waited for the lock.
            if current is None or kid not in current.keys or now - current.fetched_at >= REFRESH_AFTER:
                if self._last_attempt is None or self._clock() - self._last_attempt >= REFETCH_INTERVAL:
                    self._refresh_locked()
            current = self._keys
        if current is None:
            raise InvalidToken("keys_unavailable")
        return current.keys.get(kid)

    def _refresh_locked(self) -> None:
        self._last_attempt = self._clock()
        try:
            url = self._jwks_url or self._discover()
            document = self._fetch(url)
            keys = _parse_jwks(document)
        except _FetchFailed as exc:
            if not self._failing or self._keys is None:
                logger.error(
                    "cannot fetch the OAuth issuer's signing keys (%s): %s; %s, retrying at most every %.0f s",
                    self._issuer, exc, "OAuth tokens are refused until it answers" if self._keys is None
                    else "keeping the keys fetched before", REFETCH_INTERVAL,
                )
            self._failing = True
            return
        if self._failing:
            logger.info("fetched the OAuth issuer's signing keys again (%d key(s))", len(keys))
        self._failing = False
        self._keys = _KeySet(keys, self._clock())

    def _discover(self) -> str:
        problems = []
        for url in metadata_urls(self._issuer):
            try:
                metadata = self._fetch(url)
            except _FetchFailed as exc:
                problems.append(f"{url}: {exc}")
                continue
            issuer = metadata.get("issuer")
            if not isinstance(issuer, str) or issuer.rstrip("/") != self._issuer.rstrip("/"):
                problems.append(f"{url}: its issuer {issuer!r} is not KB_OAUTH_ISSUER")
                continue
            if issuer != self._issuer:
                logger.warning("the issuer's metadata says %r; tokens must carry exactly KB_OAUTH_ISSUER=%r as iss",
                               issuer, self._issuer)
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not _secure(jwks_uri):
                problems.append(f"{url}: no https jwks_uri")
                continue
            self._jwks_url = jwks_uri
            return jwks_uri
        raise _FetchFailed("; ".join(problems))

    # --- tokens ---------------------------------------------------------------------------------

    def verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("malformed") from None
        algorithm = header.get("alg")
        if algorithm not in ASYMMETRIC:
            raise InvalidToken("algorithm")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("malformed")
        key = self._key_for(kid)
        if key is None:
            raise InvalidToken("unknown_kid")
        if key.algorithm_name != algorithm and not _same_family(key.algorithm_name, algorithm):
            raise InvalidToken("algorithm")
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[algorithm], audience=self._audience, issuer=self._issuer, leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("not_yet_valid") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("wrong_issuer") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("wrong_audience") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("bad_signature") from None
        except jwt.PyJWTError:
            raise InvalidToken("invalid_claims") from None
        return principal_from_claims(claims)


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    """The principal a verified token stands for: named by `sub` (else `client_id`, `azp`), with the kb:*
    scopes of its space-separated `scope` claim (or an `scp` list, as Entra ID and Okta send), limited to
    the collections of `kb_collections` when present (a malformed limit, null included, refuses the token:
    never wider)."""
    name = next((claims[k] for k in ("sub", "client_id", "azp") if isinstance(claims.get(k), str) and claims[k]), None)
    if name is None:
        raise InvalidToken("invalid_claims")
    granted: list[str] = []
    for claim in ("scope", "scp"):
        value = claims.get(claim)
        if isinstance(value, str):
            # Separated by spaces (U+0020) only (RFC 6749 section 3.3): str.split() also splits at U+00A0, U+3000
            # and the other Unicode spaces, which would turn one odd scope an issuer granted into kb:* ones.
            granted += [s for s in value.split(" ") if s]
        elif isinstance(value, list):
            granted += [v for v in value if isinstance(v, str)]
    scopes = frozenset(s for s in granted if s in KNOWN_SCOPES)
    collections = None
    if COLLECTIONS_CLAIM in claims:
        # Present is limited, whatever its value: a null (an issuer's claim mapper with no value for this user)
        # is a malformed limit, never "every collection".
        limit = claims[COLLECTIONS_CLAIM]
        if not isinstance(limit, list) or not all(isinstance(c, str) for c in limit):
            raise InvalidToken("invalid_claims")
        try:
            collections = parse_collections(limit, COLLECTIONS_CLAIM)
        except ValueError:
            raise InvalidToken("invalid_claims") from None
    client = claims.get("client_id") or claims.get("azp")
    return Principal(principal_name(name), scopes=scopes, collections=collections, kind="oauth",
                     extra={"client_id": client} if isinstance(client, str) else {})


def principal_name(subject: str) -> str:
    """A subject as a principal's name, at most MAX_NAME characters and never shared by two subjects: the name
    owns uploads and tasks and keeps a console session, so cutting long subjects to their first 200 characters
    made every subject with that start one principal. A shorter subject is its own name; one of MAX_NAME or more
    keeps its start and ends in a digest of the whole, making exactly MAX_NAME characters, a length no subject
    kept whole has."""
    if len(subject) < MAX_NAME:
        return subject
    digest = hashlib.sha256(subject.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return subject[: MAX_NAME - len(digest) - 1] + "~" + digest


def _same_family(key_algorithm: str, token_algorithm: str) -> bool:
    """An RSA key without an `alg` is inferred as RS256 but may sign PS256 and the other RS/PS sizes."""
    rsa = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
    return key_algorithm in rsa and token_algorithm in rsa


def _parse_jwks(document: dict[str, Any]) -> dict[str | None, jwt.PyJWK]:
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise _FetchFailed("the key set has no keys list")
    keys: dict[str | None, jwt.PyJWK] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
            continue  # encryption keys and symmetric secrets never verify an access token
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue  # a key type this build cannot use: skip it, keep the others
        keys[entry.get("kid") if isinstance(entry.get("kid"), str) else None] = key
    if not keys:
        raise _FetchFailed("the key set has no usable signing key")
    if len(keys) == 1 and None not in keys:
        # A token without a kid may use the only key there is.
        keys[None] = next(iter(keys.values()))
    return keys


class _FetchFailed(Exception):
    pass


def _fetch_json(url: str) -> dict[str, Any]:
    """GET a small JSON document (metadata, key set): bounded in time and size. Redirects are followed here,
    not by requests, and only while they stay where the keys may come from (`_redirect_target`)."""
    for _ in range(MAX_REDIRECTS + 1):
        try:
            with requests.get(url, timeout=FETCH_TIMEOUT, stream=True, allow_redirects=False,
                              headers={"Accept": "application/json"}) as response:
                if response.is_redirect:
                    url = _redirect_target(url, response.headers["Location"])
                    continue
                if response.status_code != 200:
                    raise _FetchFailed(f"HTTP {response.status_code}")
                body = response.raw.read(MAX_DOCUMENT_BYTES + 1, decode_content=True)
        except requests.RequestException as exc:
            raise _FetchFailed(type(exc).__name__) from None
        return _json_object(body)
    raise _FetchFailed(f"more than {MAX_REDIRECTS} redirects")


def _redirect_target(url: str, location: str) -> str:
    """Where a redirect from `url` leads, if the document may be fetched there: never from https to anything
    else (a redirect to http would let anyone on the path choose the keys), and from an http loopback issuer
    (development) only to https or loopback. _FetchFailed otherwise, naming only the target's scheme and host."""
    target = urljoin(url, location)
    parts = urlsplit(target)
    where = f"{parts.scheme}://{parts.hostname or ''}"
    if urlsplit(url).scheme == "https" and parts.scheme != "https":
        raise _FetchFailed(f"refused a redirect from https to {where}")
    if not _secure(target):
        raise _FetchFailed(f"refused a redirect to {where}: not https, nor http on loopback")
    return target


def _json_object(body: bytes) -> dict[str, Any]:
    if len(body) > MAX_DOCUMENT_BYTES:
        raise _FetchFailed("the document is larger than 1 MiB")
    try:
        data = json.loads(body)
    except ValueError:
        raise _FetchFailed("not JSON") from None
    if not isinstance(data, dict):
        raise _FetchFailed("not a JSON object")
    return data
