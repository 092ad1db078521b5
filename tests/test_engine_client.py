"""EngineClient: retries, error translation, both engine error shapes, size caps, secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
import responses

from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import (
    Conflict,
    EngineAuthFailed,
    EngineBadResponse,
    EngineConnectFailed,
    EngineFailure,
    EngineTimeout,
    EngineUnavailable,
    InvalidArgument,
    NotANote,
    NotFound,
    OutcomeUnknown,
    Retryable,
    StorageFull,
    TooLarge,
    UnsupportedType,
)
from kb_bridge.client.retry import RetryPolicy
from kb_bridge.credentials.secret import Secret
from kb_bridge.settings import EngineSettings
from kb_bridge.testing.fake_engine import API, ENGINE
from kb_bridge.testing.fake_engine import calls_to, job

KEY = "engine-secret-key-123"


def make_client(**overrides: object) -> EngineClient:
    settings = EngineSettings(api_key=Secret(KEY), retry_backoff=0, retry_max_wait=0, **overrides)  # type: ignore[arg-type]
    return EngineClient(settings)


@pytest.fixture
def client() -> EngineClient:
    return make_client()


def test_every_request_carries_the_engine_key(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", json={"version": "3.0.0"})
    client.status()
    assert engine.calls[0].request.headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_33_reads_retry_on_server_errors_then_succeed(client: EngineClient, engine: responses.RequestsMock, status: int) -> None:
    engine.get(f"{API}/status", status=status, json={"error": {"code": "internal", "message": "boom"}})
    engine.get(f"{API}/status", json={"version": "3.0.0"})
    assert client.status()["version"] == "3.0.0"
    assert len(engine.calls) == 2


def test_33_reads_give_up_after_the_configured_attempts(engine: responses.RequestsMock) -> None:
    client = make_client(retry_attempts=3)
    engine.get(f"{API}/status", status=503, json={})
    with pytest.raises(EngineUnavailable):
        client.status()
    assert len(engine.calls) == 3


def test_server_error_after_retries_is_engine_error(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", status=500, body="<html>Internal Server Error</html>")
    with pytest.raises(EngineFailure) as caught:
        client.status()
    assert caught.value.code == "ENGINE_ERROR"
    assert "<html>" not in caught.value.message


def test_33_retry_after_is_honoured_with_a_cap() -> None:
    policy = RetryPolicy(EngineSettings(retry_backoff=0.5, retry_max_wait=2.0))
    assert policy.wait_seconds(1, retry_after=1.5) == 1.5
    assert policy.wait_seconds(1, retry_after=120) == 2.0
    waits = [policy.wait_seconds(3, None) for _ in range(200)]
    assert 0 <= min(waits) and max(waits) <= 2.0 and len(set(waits)) > 1  # jittered, bounded


def test_33_retry_after_header_is_used_between_attempts(engine: responses.RequestsMock) -> None:
    slept: list[float] = []
    settings = EngineSettings(retry_backoff=0, retry_max_wait=5.0)
    client = EngineClient(settings, retry=RetryPolicy(settings, sleep=slept.append))
    engine.get(f"{API}/status", status=503, headers={"Retry-After": "3"}, json={})
    engine.get(f"{API}/status", json={"version": "3"})
    client.status()
    assert slept == [3.0]


def test_an_engine_whose_database_is_away_is_not_called_unreachable(engine: responses.RequestsMock) -> None:
    client = make_client(retry_attempts=1)
    engine.get(f"{API}/status", status=503, json={"error": {"code": "store_unavailable", "message":
                                                            "PostgreSQL is unavailable: connection refused"}})
    with pytest.raises(EngineUnavailable) as caught:
        client.status()
    assert caught.value.code == "ENGINE_UNAVAILABLE" and "unreachable" not in caught.value.message
    assert caught.value.message == "the kb engine answers, but its database is unavailable; try again shortly"


def test_connection_refused_is_engine_unavailable(tmp_path: Path) -> None:
    client = EngineClient(EngineSettings(url="http://127.0.0.1:9", retry_attempts=2, retry_backoff=0, retry_max_wait=0))
    with pytest.raises(EngineConnectFailed) as caught:
        client.status()
    assert caught.value.code == "ENGINE_UNAVAILABLE"


def test_read_timeout_is_engine_timeout(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", body=requests.exceptions.ReadTimeout("Read timed out."))
    with pytest.raises(EngineTimeout) as caught:
        client.status()
    assert caught.value.code == "ENGINE_TIMEOUT"
    assert len(engine.calls) == 3


def test_34_note_job_is_retried_with_the_same_idempotency_key(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", body=requests.exceptions.ReadTimeout("Read timed out."))
    engine.post(f"{API}/jobs", status=200, json=job(5))
    result = client.create_note_job({"text": "x", "tags": []}, idempotency_key="key-1")
    assert result["id"] == 5
    keys = [c.request.headers["Idempotency-Key"] for c in calls_to(engine, "POST", "/jobs")]
    assert keys == ["key-1", "key-1"]


def test_34_unsafe_write_is_not_retried_and_says_outcome_unknown(client: EngineClient, engine: responses.RequestsMock) -> None:
    # PATCH without If-Match: a repeat could overwrite a change made in between.
    engine.patch(f"{API}/notes/4", status=503, json={})
    with pytest.raises(OutcomeUnknown) as caught:
        client.patch_note(4, {"text": "x"}, if_match=None)
    assert len(engine.calls) == 1
    assert "may or may not" in caught.value.message


def test_unsafe_write_that_never_left_is_unavailable_not_unknown() -> None:
    client = EngineClient(EngineSettings(url="http://127.0.0.1:9", retry_attempts=3, retry_backoff=0, retry_max_wait=0))
    with pytest.raises(EngineConnectFailed):
        client.patch_note(4, {"text": "x"}, if_match=None)


def test_patch_with_if_match_is_safe_to_retry(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/4", status=503, json={})
    engine.patch(f"{API}/notes/4", json={"id": 4, "version": 3})
    client.patch_note(4, {"text": "x"}, if_match=2)
    assert [c.request.headers["If-Match"] for c in engine.calls] == ['"2"', '"2"']


@pytest.mark.parametrize(
    ("status", "payload", "error", "code"),
    [
        (404, {"error": {"code": "not_found", "message": "nope"}}, NotFound, "NOT_FOUND"),
        (409, {"error": {"code": "not_a_note", "message": "pdf"}}, NotANote, "NOT_A_NOTE"),
        (409, {"error": {"code": "conflict", "message": "key reused"}}, Conflict, "CONFLICT"),
        (412, {"error": {"code": "precondition_failed", "message": "v"}}, Conflict, "CONFLICT"),
        (413, {"error": {"code": "payload_too_large", "message": "big"}}, TooLarge, "TOO_LARGE"),
        (415, {"error": {"code": "unsupported_media_type", "message": "exe"}}, UnsupportedType, "UNSUPPORTED_TYPE"),
        (401, {"error": {"code": "unauthorized", "message": "bad key " + KEY}}, EngineAuthFailed, "ENGINE_AUTH_ERROR"),
        (403, {"detail": "Forbidden"}, EngineAuthFailed, "ENGINE_AUTH_ERROR"),
        (421, {"error": {"code": "misdirected_request", "message": "host"}}, EngineFailure, "ENGINE_ERROR"),
        (400, {"error": {"code": "bad_request", "message": "query too long"}}, InvalidArgument, "VALIDATION_ERROR"),
    ],
)
def test_35_engine_4xx_are_translated_and_not_retried(
    client: EngineClient, engine: responses.RequestsMock, status: int, payload: dict, error: type, code: str
) -> None:
    engine.get(f"{API}/documents/1", status=status, json=payload)
    with pytest.raises(error) as caught:
        client.get_document(1)
    assert caught.value.code == code
    assert len(engine.calls) == 1
    assert KEY not in caught.value.message


def test_an_engine_that_wants_a_key_when_none_is_set_is_named_as_kb_api_key_not_set(
    engine: responses.RequestsMock,
) -> None:
    """`kb-bridge list` without KB_API_KEY said "the kb engine rejected KB_API_KEY", as if the key were wrong."""
    engine.get(f"{API}/documents/1", status=401, json={"error": {"code": "unauthorized", "message": "key required"}})
    with pytest.raises(EngineAuthFailed) as caught:
        EngineClient(EngineSettings(retry_backoff=0, retry_max_wait=0)).get_document(1)
    assert caught.value.code == "ENGINE_AUTH_ERROR"
    assert caught.value.message == "bridge misconfigured: the kb engine wants a key and KB_API_KEY is not set"


def test_a_host_the_engine_does_not_answer_for_is_named_as_the_bridges_misconfiguration(
    client: EngineClient, engine: responses.RequestsMock,
) -> None:
    """The local engine answers 421 to a Host outside KB_ENGINE_ALLOWED_HOSTS (docs/engine-api.md, Errors): the
    bridge said only "an unexpected status 421", on every call and in /readyz."""
    engine.get(f"{API}/status", status=421, json={"error": {"code": "misdirected_request", "message": "no"}})
    with pytest.raises(EngineFailure) as caught:
        client.status()
    assert "KB_ENGINE_ALLOWED_HOSTS" in caught.value.message and "unexpected" not in caught.value.message



def test_a_full_engine_disk_says_nothing_was_stored_and_is_not_retried(
    client: EngineClient, engine: responses.RequestsMock,
) -> None:
    """The local engine answers 507 storage_full when its disk is full, with nothing of the request stored: the
    agent is told so (STORAGE_FULL: it may send the note again later without making two), where it got
    OUTCOME_UNKNOWN after three retries; a retry at once would meet the same full disk."""
    engine.post(f"{API}/jobs", status=507, json={"error": {"code": "storage_full", "message": "the data directory is full"}})
    with pytest.raises(StorageFull) as caught:
        client.create_note_job({"text": "remember this"}, "k-1")
    assert not isinstance(caught.value, Retryable)
    assert caught.value.code == "STORAGE_FULL"
    assert "nothing was stored" in caught.value.message and "full" in caught.value.message
    assert len(engine.calls) == 1

def test_a_missing_version_is_named_as_the_version_not_the_document(
    client: EngineClient, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/documents/1", status=404, json={"error": {"code": "not_found", "message": "no such version"}})
    with pytest.raises(NotFound) as caught:
        client.get_version(1, 99)
    assert caught.value.message == "version 99 of document 1 not found"


def test_35_auth_failure_says_the_bridge_is_misconfigured(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", status=401, json={"error": {"code": "unauthorized", "message": "no"}})
    with pytest.raises(EngineAuthFailed) as caught:
        client.status()
    assert "KB_API_KEY" in caught.value.message and "misconfigured" in caught.value.message


def test_fastapi_detail_string_and_list_shapes_are_understood(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", status=422, json={"detail": [{"loc": ["body", "top_n"], "msg": "too big"}]})
    with pytest.raises(InvalidArgument) as caught:
        client.search({"query": "x"})
    assert "top_n: too big" in caught.value.message
    engine.get(f"{API}/documents/2", status=400, json={"detail": "bad id"})
    with pytest.raises(InvalidArgument) as caught2:
        client.get_document(2)
    assert "bad id" in caught2.value.message


@pytest.mark.parametrize("payload", [b"not json", b"<html><body>oops</body></html>", b"", b"[1, 2]"])
def test_36_malformed_engine_body_is_a_clean_error(client: EngineClient, engine: responses.RequestsMock, payload: bytes) -> None:
    engine.get(f"{API}/status", body=payload, content_type="application/json")
    with pytest.raises(EngineBadResponse) as caught:
        client.status()
    assert caught.value.code == "ENGINE_ERROR"


def test_36_huge_engine_body_is_refused(engine: responses.RequestsMock) -> None:
    client = make_client(max_response_bytes=1024)
    engine.get(f"{API}/status", body=json.dumps({"pad": "x" * 5000}))
    with pytest.raises(EngineBadResponse, match="larger than allowed"):
        client.status()


# ".." and "." alone are dot segments, which URL normalisation removes (urllib3): DELETE …/tags/.. went out as
# DELETE …/documents/7/ and the tag could not be removed.
@pytest.mark.parametrize("tag", ["collection:memory", "a/b", "?x=1", "%2F", "../up", "..", "."])
def test_15_path_segments_are_encoded_as_one_segment(client: EngineClient, engine: responses.RequestsMock, tag: str) -> None:
    engine.add(responses.DELETE, url=__import__("re").compile(rf"{API}/documents/7/tags/.*"), json={"id": 7, "tags": [], "version": 2})
    client.remove_tag(7, tag)
    sent = engine.calls[0].request.url
    encoded = sent.split("/documents/7/tags/", 1)[1]
    assert "/" not in encoded and "?" not in encoded
    assert requests.utils.unquote(encoded) == tag


def test_engine_url_credentials_never_appear_in_safe_url() -> None:
    settings = EngineSettings(url="http://user:pw@engine:8000/base")
    assert settings.safe_url() == "http://engine:8000/base"


def test_proxies_from_the_environment_are_ignored(monkeypatch: pytest.MonkeyPatch, engine: responses.RequestsMock) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    client = make_client()
    engine.get(f"{ENGINE}/healthz", json={"ok": True})
    assert client.healthz() == {"ok": True}


def test_a_write_that_timed_out_on_every_attempt_is_outcome_unknown(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", body=requests.exceptions.ReadTimeout("Read timed out."))
    with pytest.raises(OutcomeUnknown):
        client.create_note_job({"text": "x", "tags": []}, idempotency_key="k")
    assert len(engine.calls) == 3  # retried (same key), then honest about not knowing


def test_a_write_that_never_reached_the_engine_is_unavailable() -> None:
    client = EngineClient(EngineSettings(url="http://127.0.0.1:9", retry_attempts=2, retry_backoff=0, retry_max_wait=0))
    with pytest.raises(EngineConnectFailed):
        client.create_note_job({"text": "x", "tags": []}, idempotency_key="k")


def test_a_read_that_timed_out_is_unavailable_not_unknown(client: EngineClient, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/1", body=requests.exceptions.ReadTimeout("Read timed out."))
    with pytest.raises(EngineTimeout):
        client.get_document(1)
