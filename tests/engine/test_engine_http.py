"""The HTTP surface in general: health, status, auth, JSON errors for unknown routes and bugs."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

import flask
import pytest

from kb_bridge import json_values
from kb_bridge.local_engine.api import validation
from kb_bridge.local_engine.errors import ValidationError
from kb_bridge.local_engine.store.postgres import documents as pg_documents
from kb_bridge.local_engine.store.sqlite import documents

from kb_bridge.testing.engine_app import API, error_code, upload

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores

KEY = "s3cret-key"


def test_healthz_is_public_and_ok(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(api_key=KEY).test_client()
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json == {"ok": True}


def test_status_without_embedder_reports_fts_only(client: flask.testing.FlaskClient) -> None:
    status = client.get(f"{API}/status").json
    assert status["version"].startswith("3.")
    assert status["api"] == "v1"
    assert status["model"] is None
    assert status["search_modes"] == ["fts"]
    assert status["embedder"]["state"] == "disabled"
    assert status["documents"] == {"total": 0, "notes": 0, "files": 0}
    assert status["queue"] == {"queued": 0, "running": 0, "done": 0, "failed": 0, "cancelled": 0}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Basic {KEY}"},
        {"X-API-Key": "wrong"},
        {"Authorization": "Bearer clé-ünïcödé"},
    ],
)
def test_api_rejects_missing_or_wrong_key(make_app: Callable[..., flask.Flask], headers: dict[str, str]) -> None:
    client = make_app(api_key=KEY).test_client()
    response = client.get(f"{API}/status", headers=headers)
    assert response.status_code == 401
    assert error_code(response) == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert KEY not in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "headers", [{"Authorization": f"Bearer {KEY}"}, {"Authorization": f"bearer {KEY}"}, {"X-API-Key": KEY}]
)
def test_api_accepts_the_key(make_app: Callable[..., flask.Flask], headers: dict[str, str]) -> None:
    client = make_app(api_key=KEY).test_client()
    assert client.get(f"{API}/status", headers=headers).status_code == 200


def test_unknown_api_route_needs_the_key_before_it_is_a_404(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(api_key=KEY).test_client()
    assert client.get(f"{API}/nope").status_code == 401
    response = client.get(f"{API}/nope", headers={"X-API-Key": KEY})
    assert response.status_code == 404 and error_code(response) == "not_found"


def test_unknown_route_and_wrong_method_answer_in_the_error_shape(client: flask.testing.FlaskClient) -> None:
    response = client.get("/nowhere")
    assert response.status_code == 404 and error_code(response) == "not_found"
    response = client.put(f"{API}/search", json={})
    assert response.status_code == 405 and error_code(response) == "method_not_allowed"
    assert "POST" in response.headers["Allow"]


@pytest.mark.parametrize("path", [f"{API}/documents/0", f"{API}/documents/-1", f"{API}/documents/abc",
                                  f"{API}/documents/99999999999999999999999"])
def test_ids_that_are_not_positive_64_bit_integers_are_404(client: flask.testing.FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404 and error_code(response) == "not_found"


def test_a_bug_is_a_generic_500_with_the_traceback_only_in_the_log(
    client: flask.testing.FlaskClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(conn: object) -> dict[str, int]:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(documents, "counts", broken)
    monkeypatch.setattr(pg_documents, "counts", broken)
    response = client.get(f"{API}/status")
    assert response.status_code == 500 and error_code(response) == "internal"
    assert "secret internals" not in response.get_data(as_text=True)
    assert any("secret internals" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)


# Nested 100,000 deep: the JSON parser's RecursionError was a 500 (only ValueError was caught).
DEEP = b'{"query": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"", DEEP], ids=["text", "array", "empty", "deep"])
def test_a_body_that_is_not_a_json_object_is_400(client: flask.testing.FlaskClient, body: bytes) -> None:
    response = client.post(f"{API}/search", data=body, content_type="application/json")
    assert response.status_code == 400 and error_code(response) == "bad_request"


def test_a_multipart_tags_field_nested_100000_deep_is_422(client: flask.testing.FlaskClient) -> None:
    response = upload(client, "deep.md", b"# Deep", tags="[" * 100_000 + "]" * 100_000)
    assert response.status_code == 422 and error_code(response) == "validation_error"
    assert response.json["error"]["message"].startswith("tags")


def test_a_json_body_over_the_limit_is_413(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(max_json_bytes=2048).test_client()
    response = client.post(f"{API}/jobs", json={"text": "x" * 5000})
    assert response.status_code == 413 and error_code(response) == "payload_too_large"


@pytest.mark.parametrize(("path", "fields", "named"), [
    ("/jobs", {"text": "caf\udce9"}, "text"),
    ("/jobs", {"text": "ok", "title": "\udcff"}, "title"),
    ("/jobs", {"text": "ok", "tags": ["fine", "bad \ud800"]}, "tags[1]"),
    ("/jobs", {"text": "ok", "source_path": "notes/\udcff.md"}, "source_path"),
    ("/search", {"query": "\udcff"}, "query"),
])
def test_text_holding_a_lone_surrogate_is_422_naming_the_field(
        client: flask.testing.FlaskClient, path: str, fields: dict[str, object], named: str) -> None:
    """JSON may escape a lone surrogate ("\\udcff": bytes that were not UTF-8, decoded with surrogateescape,
    as json.dumps writes them); such text cannot be encoded as UTF-8, which was a 500 (and clients retried)."""
    response = client.post(f"{API}{path}", json=fields)
    assert response.status_code == 422 and error_code(response) == "validation_error", response.json
    assert response.json["error"]["message"].startswith(named), response.json


def test_checking_a_body_of_a_million_values_for_lone_surrogates_holds_no_copy_of_it() -> None:
    """The check named every value as it queued it ("x[123456]", with a tuple each): a body of 3 million empty
    arrays (8.6 MiB, inside KB_ENGINE_MAX_JSON_BYTES) took the engine's worker 830 MiB over its size and 7.5 s.
    It names only the value it refuses."""
    body = {"x": [[]] * 1_000_000, "y": {"z": ["fine"] * 1000}}
    tracemalloc.start()
    try:
        validation._check_unicode(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    with pytest.raises(ValidationError, match=r"^y\.z\[1\]\[0\] must be Unicode text"):
        validation._check_unicode({"x": [[]] * 1000, "y": {"z": [["ok"], ["\udcff"]]}})
    with pytest.raises(ValidationError, match="a field name"):
        validation._check_unicode({"x": [{"ok": 1}, {"\ud800": 1}]})


def test_a_body_of_more_json_values_than_any_request_needs_is_400_before_it_is_parsed(
        client: flask.testing.FlaskClient) -> None:
    """30 MiB of empty arrays (10.5 million, inside KB_ENGINE_MAX_JSON_BYTES) took a worker 795 MiB to parse."""
    body = b'{"query": "a", "x": [' + b",".join([b"[]"] * (validation.MAX_JSON_VALUES + 1)) + b"]}"
    response = client.post(f"{API}/search", data=body, content_type="application/json")
    assert response.status_code == 400 and error_code(response) == "bad_request", response.json
    assert f"more than {validation.MAX_JSON_VALUES} JSON values" in response.json["error"]["message"]
    # The largest body a request needs, PUT .../versions with 10,000 versions of 100 tags, is under the limit,
    # and brackets and quotes inside strings are text.
    versions = [{"version": n, "title": "t", "text": '[,{"\\', "tags": [f"t{k}" for k in range(100)],
                 "updated_at": "2026-01-01T00:00:00Z", "changed_by": "a"} for n in range(1, 10_001)]
    assert not json_values.more_than(json.dumps({"versions": versions}).encode(), validation.MAX_JSON_VALUES)


@pytest.mark.parametrize("value", ["²", "٣", "+1", " 1", "1e3", "1" * 5000])
@pytest.mark.parametrize(("path", "name"), [("/documents", "limit"), ("/documents", "offset"), ("/jobs", "limit")])
def test_a_query_number_that_is_not_ascii_digits_is_422_naming_it(
        client: flask.testing.FlaskClient, path: str, name: str, value: str) -> None:
    """Every query parameter's number is read as ?version= is: int() took "٣", "+1" and " 1", and
    raised past 4,300 digits (a 500)."""
    response = client.get(f"{API}{path}", query_string={name: value})
    assert response.status_code == 422 and error_code(response) == "validation_error", response.json
    assert response.json["error"]["message"].startswith(name), response.json


def test_a_query_number_with_leading_zeros_is_read_as_its_value(client: flask.testing.FlaskClient) -> None:
    for text in ("first", "second", "third"):
        client.post(f"{API}/jobs", json={"text": text})
    assert len(client.get(f"{API}/jobs", query_string={"limit": "0002"}).json["jobs"]) == 2
    huge_zeros = client.get(f"{API}/jobs", query_string={"limit": "0" * 5000 + "1"})
    assert huge_zeros.status_code == 200 and len(huge_zeros.json["jobs"]) == 1
