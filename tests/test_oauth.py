"""The OAuth verifier against a real authorization server on loopback (kb_bridge/testing/oauth_server.py):
every kind of bad token, discovery both ways, the overrides, key rotation and the refetch rate limit."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kb_bridge.auth import oauth
from kb_bridge.auth.oauth import InvalidToken, OAuthVerifier, metadata_urls, principal_from_claims
from kb_bridge.settings import OAuthSettings, load_settings
from kb_bridge.testing.oauth_server import AuthServer, new_key, self_signed_certificate
from kb_bridge.testing.processes import free_port

PUBLIC = "http://127.0.0.1:8765"
RESOURCE = PUBLIC + "/mcp"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[AuthServer]:
    s = AuthServer(audience=RESOURCE).start()
    yield s
    s.stop()


def verifier_for(server: AuthServer, clock: Clock | None = None, **overrides: str) -> OAuthVerifier:
    settings = OAuthSettings(issuer=server.issuer, public_url=PUBLIC, **overrides)
    return OAuthVerifier(settings, clock=clock or time.monotonic)


def refused(verifier: OAuthVerifier, token: str) -> str:
    with pytest.raises(InvalidToken) as caught:
        verifier.verify(token)
    return caught.value.reason


def test_a_good_token_is_a_principal_with_its_subject_scopes_and_collections(server: AuthServer) -> None:
    verifier = verifier_for(server)
    principal = verifier.verify(server.token(sub="alice", scope="kb:read kb:write openid", kb_collections=["memory"]))
    assert principal.name == "alice"
    assert principal.kind == "oauth"
    assert principal.scopes == frozenset({"kb:read", "kb:write"})
    assert principal.collections == frozenset({"memory"})


def test_audience_may_be_a_list_containing_the_resource(server: AuthServer) -> None:
    verifier = verifier_for(server)
    assert verifier.verify(server.token(aud=["https://other.example", RESOURCE])).name == "agent-1"


# Times are offsets from now, resolved when the test runs (not when pytest collects it).
@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": -120}, "expired"),
        ({"nbf": 600}, "not_yet_valid"),
        ({"iss": "http://127.0.0.1:1/other"}, "wrong_issuer"),
        ({"aud": "https://someone-else.example/mcp"}, "wrong_audience"),
        ({"aud": None}, "invalid_claims"),
        ({"exp": None}, "invalid_claims"),
        ({"sub": None, "client_id": None}, "invalid_claims"),
        ({"kb_collections": "memory"}, "invalid_claims"),
        ({"kb_collections": ["Not A Name!"]}, "invalid_claims"),
    ],
)
def test_bad_claims_are_refused(server: AuthServer, claims: dict[str, object], reason: str) -> None:
    now = int(time.time())
    resolved = {k: now + v if k in ("exp", "nbf") and isinstance(v, int) else v for k, v in claims.items()}
    assert refused(verifier_for(server), server.token(**resolved)) == reason


def test_a_null_collections_claim_is_refused_never_read_as_every_collection(server: AuthServer) -> None:
    """An issuer's claim mapper with no value for a user writes `"kb_collections": null`; read as absent, the
    token saw every collection."""
    key = server.keys[0]
    now = int(time.time())
    claims = {"iss": server.issuer, "aud": RESOURCE, "sub": "alice", "exp": now + 300, "scope": "kb:read",
              "kb_collections": None}
    token = jwt.encode(claims, key.private, algorithm=key.algorithm, headers={"kid": key.kid})
    assert refused(verifier_for(server), token) == "invalid_claims"


def test_leeway_of_60_seconds_on_exp_and_nbf(server: AuthServer) -> None:
    verifier = verifier_for(server)
    now = int(time.time())
    assert verifier.verify(server.token(exp=now - 30)).name == "agent-1"
    assert verifier.verify(server.token(nbf=now + 30)).name == "agent-1"


def test_malformed_tokens_are_refused(server: AuthServer) -> None:
    verifier = verifier_for(server)
    assert refused(verifier, "not.a.jwt") == "malformed"
    assert refused(verifier, "a.b") == "malformed"


def test_a_bad_signature_is_refused(server: AuthServer) -> None:
    verifier = verifier_for(server)
    header, payload, signature = server.token().split(".")
    forged_payload = base64.urlsafe_b64encode(json.dumps({"sub": "admin"}).encode()).decode().rstrip("=")
    assert refused(verifier, f"{header}.{forged_payload}.{signature}") == "bad_signature"
    # Signed by a key that is not published, under a published kid.
    stranger = new_key(kid=server.keys[0].kid)
    assert refused(verifier, server.token(key=stranger)) == "bad_signature"


def test_alg_none_is_refused(server: AuthServer) -> None:
    verifier = verifier_for(server)
    unsigned = jwt.encode({"iss": server.issuer, "aud": RESOURCE, "sub": "x", "exp": int(time.time()) + 60}, None,
                          algorithm="none", headers={"kid": server.keys[0].kid})
    assert refused(verifier, unsigned) == "algorithm"


def test_hs256_with_the_public_key_as_secret_is_refused(server: AuthServer) -> None:
    verifier = verifier_for(server)
    public_pem = server.keys[0].private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": server.keys[0].kid}).encode()).rstrip(b"=")
    claims = {"iss": server.issuer, "aud": RESOURCE, "sub": "x", "exp": int(time.time()) + 60}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    signature = base64.urlsafe_b64encode(hmac.new(public_pem, header + b"." + payload, hashlib.sha256).digest()).rstrip(b"=")
    assert refused(verifier, (header + b"." + payload + b"." + signature).decode()) == "algorithm"


def test_an_es256_key_works_too(server: AuthServer) -> None:
    key = server.rotate("ES256")
    assert verifier_for(server).verify(server.token(key=key)).name == "agent-1"


def test_unknown_kid_is_refused(server: AuthServer) -> None:
    stranger = new_key()
    assert refused(verifier_for(server), server.token(key=stranger)) == "unknown_kid"


def test_rotation_a_new_key_is_fetched_when_a_token_names_it(server: AuthServer) -> None:
    clock = Clock()
    verifier = verifier_for(server, clock)
    assert verifier.verify(server.token()).name == "agent-1"
    new = server.rotate(keep_old=False)
    clock.now += oauth.REFETCH_INTERVAL  # any time after the last fetch's rate-limit window
    assert verifier.verify(server.token(key=new)).name == "agent-1"


def test_a_burst_of_unknown_kids_costs_one_fetch(server: AuthServer) -> None:
    clock = Clock()
    verifier = verifier_for(server, clock)
    verifier.verify(server.token())
    before = server.jwks_fetches
    clock.now += oauth.REFETCH_INTERVAL
    for _ in range(30):
        refused(verifier, server.token(key=new_key()))
    assert server.jwks_fetches - before == 1
    # A newly published key is still accepted once the window has passed.
    new = server.rotate()
    assert refused(verifier, server.token(key=new)) == "unknown_kid"
    clock.now += oauth.REFETCH_INTERVAL
    assert verifier.verify(server.token(key=new)).name == "agent-1"
    assert server.jwks_fetches - before == 2


def test_the_key_set_is_refreshed_after_a_while(server: AuthServer) -> None:
    clock = Clock()
    verifier = verifier_for(server, clock)
    verifier.verify(server.token())
    before = server.jwks_fetches
    clock.now += oauth.REFRESH_AFTER
    verifier.verify(server.token())
    assert server.jwks_fetches == before + 1


@pytest.mark.parametrize("discovery", ["rfc8414", "oidc"])
def test_both_discovery_paths_find_the_keys(discovery: str) -> None:
    server = AuthServer(discovery=discovery, issuer_path="/realms/kb", audience=RESOURCE).start()
    try:
        assert verifier_for(server).verify(server.token()).name == "agent-1"
        path = "/.well-known/oauth-authorization-server/realms/kb" if discovery == "rfc8414" else "/realms/kb/.well-known/openid-configuration"
        assert server.requests[path] == 1
    finally:
        server.stop()


def test_rfc8414_is_tried_first_with_the_path_after_the_well_known_part() -> None:
    assert metadata_urls("https://id.example/realms/kb") == [
        "https://id.example/.well-known/oauth-authorization-server/realms/kb",
        "https://id.example/realms/kb/.well-known/openid-configuration",
    ]


def test_jwks_url_override_skips_discovery() -> None:
    server = AuthServer(discovery="none", audience=RESOURCE).start()  # publishes no metadata at all
    try:
        verifier = verifier_for(server, jwks_url=server.jwks_uri)
        assert verifier.verify(server.token()).name == "agent-1"
        assert sum(count for path, count in server.requests.items() if path != "/jwks") == 0
    finally:
        server.stop()


def test_audience_override_replaces_the_resource() -> None:
    server = AuthServer(audience="api://kb").start()
    try:
        verifier = verifier_for(server, audience="api://kb")
        assert verifier.verify(server.token()).name == "agent-1"
        assert refused(verifier, server.token(aud=RESOURCE)) == "wrong_audience"
    finally:
        server.stop()


def test_metadata_naming_another_issuer_is_not_trusted(server: AuthServer) -> None:
    settings = OAuthSettings(issuer=server.issuer + "/elsewhere", public_url=PUBLIC)
    assert refused(OAuthVerifier(settings), server.token(iss=server.issuer + "/elsewhere")) == "keys_unavailable"


def test_an_unreachable_issuer_refuses_every_token_logs_why_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    settings = OAuthSettings(issuer=f"http://127.0.0.1:{port}", public_url=PUBLIC)
    clock = Clock()
    verifier = OAuthVerifier(settings, clock=clock)
    with caplog.at_level(logging.ERROR, logger="kb_bridge.auth.oauth"):
        verifier.prime()
    assert "cannot fetch the OAuth issuer's signing keys" in caplog.text
    assert "retrying" in caplog.text
    token = jwt.encode({"sub": "x"}, new_key().private, algorithm="RS256", headers={"kid": "k"})
    assert refused(verifier, token) == "keys_unavailable"


def test_scp_lists_are_read_as_scopes_and_unknown_scopes_dropped() -> None:
    principal = principal_from_claims({"client_id": "svc", "scp": ["kb:read", "admin"]})
    assert principal.name == "svc"
    assert principal.scopes == frozenset({"kb:read"})
    assert principal.collections is None


def test_long_subjects_that_share_their_first_200_characters_are_different_principals() -> None:
    start = "https://idp.example/users/" + "u" * 200
    alice, mallory = (principal_from_claims({"sub": start + tail, "scope": "kb:read"}) for tail in ("alice", "mallory"))
    assert alice.name != mallory.name and alice.owner != mallory.owner
    assert len(alice.name) == len(mallory.name) == 200  # the engine keeps changed_by to 200 characters
    assert alice.name.startswith(start[:100])
    assert principal_from_claims({"sub": "a" * 199}).name == "a" * 199  # shorter ones are kept whole
    assert principal_from_claims({"sub": alice.name}).name != alice.name  # no subject is another's digest form


@pytest.mark.parametrize("separator", ["\u00a0", "\u3000", "\u2028", "\x1f", "\t", "\n"])
def test_a_scope_claim_is_split_at_spaces_only(separator: str) -> None:
    """One scope an issuer granted as it was asked for ("kb:read<U+00A0>kb:delete") is no kb:* scope; str.split()
    made it kb:read and kb:delete."""
    principal = principal_from_claims({"sub": "alice", "scope": f"kb:read{separator}kb:delete"})
    assert principal.scopes == frozenset()
    assert principal_from_claims({"sub": "alice", "scope": " kb:read  kb:delete "}).scopes == {"kb:read", "kb:delete"}


def test_settings_require_https_or_loopback_and_a_public_url() -> None:
    from kb_bridge.errors import SettingsError

    with pytest.raises(SettingsError, match="KB_OAUTH_ISSUER"):
        load_settings({"KB_OAUTH_ISSUER": "http://id.example", "KB_PUBLIC_URL": PUBLIC})
    with pytest.raises(SettingsError, match="KB_PUBLIC_URL"):
        load_settings({"KB_OAUTH_ISSUER": "https://id.example"})
    with pytest.raises(SettingsError, match="KB_OAUTH_JWKS_URL"):
        load_settings({"KB_OAUTH_ISSUER": "https://id.example", "KB_PUBLIC_URL": PUBLIC, "KB_OAUTH_JWKS_URL": "http://id.example/k"})
    settings = load_settings({"KB_OAUTH_ISSUER": "https://id.example/", "KB_PUBLIC_URL": "https://kb.example/"})
    assert settings.mcp.oauth.resource == "https://kb.example/mcp"
    assert settings.mcp.oauth.metadata_url == "https://kb.example/.well-known/oauth-protected-resource/mcp"
    assert settings.mcp.auth_enabled


# --- redirects of the metadata and key-set fetches (issue 32, item 17) ------------------------------------------
# A real https issuer on loopback: a self-signed certificate the fetches trust through REQUESTS_CA_BUNDLE (as an
# operator trusts a private CA), and a plain-http twin serving the same metadata and keys.


@pytest.fixture
def tls_issuer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AuthServer, AuthServer]]:
    certificate = self_signed_certificate(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificate.cert))
    secure = AuthServer(audience=RESOURCE, tls=certificate).start()
    plain = AuthServer(mirror_of=secure).start()
    yield secure, plain
    secure.stop()
    plain.stop()


def test_over_https_a_redirect_that_stays_on_https_is_followed(tls_issuer: tuple[AuthServer, AuthServer]) -> None:
    secure, plain = tls_issuer
    assert secure.issuer.startswith("https://")
    secure.redirects["/jwks"] = secure.base.replace("127.0.0.1", "localhost") + "/jwks?moved"
    assert verifier_for(secure).verify(secure.token()).name == "agent-1"
    assert secure.requests["/jwks"] == 2 and sum(plain.requests.values()) == 0


@pytest.mark.parametrize("moved", ["/.well-known/oauth-authorization-server", "/jwks", "two hops"])
def test_a_redirect_from_https_to_http_is_never_followed(tls_issuer: tuple[AuthServer, AuthServer], moved: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    secure, plain = tls_issuer
    if moved == "two hops":  # https -> https -> http: the second step leaves https
        secure.redirects["/jwks"] = secure.base + "/jwks?hop"
        secure.redirects["/jwks?hop"] = plain.base + "/jwks"
    else:
        secure.redirects[moved] = plain.base + moved
    with caplog.at_level(logging.ERROR, logger="kb_bridge.auth.oauth"):
        assert refused(verifier_for(secure), secure.token()) == "keys_unavailable"
    assert sum(plain.requests.values()) == 0  # the http twin (serving good keys) was never asked
    assert "redirect" in caplog.text and "https" in caplog.text


def test_from_an_http_loopback_issuer_a_redirect_off_loopback_is_not_followed(server: AuthServer,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    server.redirects["/jwks"] = "http://kb-issuer.invalid/jwks"
    with caplog.at_level(logging.ERROR, logger="kb_bridge.auth.oauth"):
        assert refused(verifier_for(server), server.token()) == "keys_unavailable"
    assert "redirect" in caplog.text


def test_a_redirect_loop_ends(tls_issuer: tuple[AuthServer, AuthServer], caplog: pytest.LogCaptureFixture) -> None:
    secure, _plain = tls_issuer
    secure.redirects["/jwks"] = secure.base + "/jwks"
    with caplog.at_level(logging.ERROR, logger="kb_bridge.auth.oauth"):
        assert refused(verifier_for(secure), secure.token()) == "keys_unavailable"
    assert secure.requests["/jwks"] <= oauth.MAX_REDIRECTS + 1
