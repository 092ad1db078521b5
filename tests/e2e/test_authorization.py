"""Authorization end to end: a real authorization server on loopback (kb_bridge/testing/oauth_server.py), a
real gunicorn bridge with OAuth, a tokens file made by `kb-bridge token new` and an API key all on at once,
the real local engine, and the official MCP Python client presenting the tokens.

Every document here lives in collections named for this module, so other modules sharing the engine
cannot disturb the counts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp.shared.auth import ProtectedResourceMetadata

from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.mcp_client import call, connect, error_of
from kb_bridge.testing.ts_client import Step, run as run_ts, tool as ts_tool

from kb_bridge.testing.console import ConsoleClient
from kb_bridge.testing.mcp_http import MODERN_META, error_code, modern_call
from kb_bridge.testing.oauth_server import AuthServer, new_key, self_signed_certificate
from kb_bridge.testing.processes import REPO, Service, clean_env, free_port, start_bridge, wait_until
from kb_bridge.testing.standin import StandInEngine

pytestmark = pytest.mark.anyio

ADMIN = "admin-key-authz-0123456789abcdef"
SUFFIX = f"{os.getpid()}"
MEM, NOTES, SECRET = f"authz-mem-{SUFFIX}", f"authz-notes-{SUFFIX}", f"authz-secret-{SUFFIX}"
MARKER = f"zebracorn{SUFFIX}"
READ_TOOLS = {"kb_search", "kb_get", "kb_list", "kb_collections", "kb_related", "kb_status", "kb_jobs"}
WRITE_TOOLS = {"kb_addnote", "kb_update_note", "kb_upload_start", "kb_upload_chunk", "kb_upload_finish",
               "kb_upload_status", "kb_upload_cancel"}


def token_new(*args: str) -> tuple[str, str]:
    """`kb-bridge token new ...` as a person runs it: (the token, the TOML entry), from what it prints."""
    done = subprocess.run([sys.executable, "-m", "kb_bridge", "token", "new", *args], capture_output=True, text=True,
                          cwd=REPO, env=clean_env({}), timeout=60, check=True)
    token, _, entry = done.stdout.partition("\n\n")
    assert "[[token]]" in entry and token not in entry
    return token.strip(), entry


@dataclass
class Setup:
    bridge: Service
    auth: AuthServer
    public_url: str
    reader: str  # static: kb:read, MEM only
    pair: str  # static: read + write + delete, MEM and NOTES
    docs: dict[str, int]

    @property
    def metadata_url(self) -> str:
        return self.public_url + "/.well-known/oauth-protected-resource/mcp"

    def jwt(self, **claims: Any) -> str:
        return self.auth.token(**claims)


def admin_call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = modern_call(url, ADMIN, tool, arguments)
    result = reply["result"]
    assert isinstance(result, dict) and not result.get("isError"), reply
    return dict(result["structuredContent"])


@pytest.fixture(scope="module")
def setup(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("authz")
    port = free_port()
    public_url = f"http://127.0.0.1:{port}"
    auth = AuthServer(discovery="rfc8414", audience=public_url + "/mcp").start()
    reader, reader_entry = token_new("reader", "--scopes", "kb:read", "--collections", MEM)
    pair, pair_entry = token_new("pair-agent", "--scopes", "kb:read,kb:write,kb:delete", "--collections", f"{MEM},{NOTES}")
    tokens_file = tmp / "tokens.toml"
    tokens_file.write_text(reader_entry + "\n" + pair_entry)
    tokens_file.chmod(0o600)  # whatever the umask: a tokens file others can write is refused
    env = {
        "KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": ADMIN,
        "KB_MCP_TOKENS_FILE": str(tokens_file), "KB_OAUTH_ISSUER": auth.issuer, "KB_PUBLIC_URL": public_url,
    }
    bridge = start_bridge(tmp, env, workers=2, port=port)
    docs = {}
    for name, collection in (("mem", MEM), ("mem2", MEM), ("notes", NOTES), ("secret", SECRET)):
        added = admin_call(bridge.url, "kb_addnote", {
            "text": f"{MARKER} {name}: the {name} note says where the {name} keys are kept.",
            "collection": collection, "title": f"{name} {MARKER}", "source_path": f"authz/{name}-{SUFFIX}.md", "wait": True,
        })
        assert added["status"] == "done", added
        docs[name] = int(added["document_id"])
    yield Setup(bridge, auth, public_url, reader, pair, docs)
    bridge.stop()
    auth.stop()


def post(setup: Setup, token: str | None, body: dict[str, Any]) -> requests.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": body["method"]}
    name = body["params"].get("name") or body["params"].get("uri")
    if name:
        headers["Mcp-Name"] = name
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(setup.bridge.url + "/mcp", json=body, headers=headers, timeout=30)


def tool_body(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META}}


def job_count(engine: Service) -> int:
    response = requests.get(engine.url + "/api/v1/jobs", params={"limit": 1},
                            headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10)
    return int(response.json()["total"])


def engine_document(engine: Service, document_id: int) -> dict[str, Any] | None:
    response = requests.get(f"{engine.url}/api/v1/documents/{document_id}",
                            headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10)
    return None if response.status_code == 404 else dict(response.json())


# --- metadata and challenges -----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
def test_protected_resource_metadata(setup: Setup, path: str) -> None:
    response = requests.get(setup.bridge.url + path, timeout=10)
    assert response.status_code == 200
    document = response.json()
    assert document["resource"] == setup.public_url + "/mcp"
    assert document["authorization_servers"] == [setup.auth.issuer]
    assert document["scopes_supported"] == ["kb:read", "kb:write", "kb:delete"]
    assert document["bearer_methods_supported"] == ["header"]
    ProtectedResourceMetadata.model_validate(document)  # the SDK's own model of RFC 9728 accepts it


def test_no_token_is_401_naming_the_metadata(setup: Setup, engine: Service) -> None:
    before = job_count(engine)
    response = post(setup, None, tool_body("kb_addnote", {"text": "never stored", "collection": MEM}))
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{setup.metadata_url}"'
    assert job_count(engine) == before


def bad_tokens(auth: AuthServer) -> dict[str, str]:
    now = int(time.time())
    key = auth.keys[-1]
    header, payload, signature = auth.token().split(".")
    return {
        "malformed": "abc.def.ghi",
        "expired": auth.token(exp=now - 600),
        "not yet valid": auth.token(nbf=now + 600),
        "wrong issuer": auth.token(iss="http://127.0.0.1:9/not-the-issuer"),
        "wrong audience": auth.token(aud="http://127.0.0.1:9/mcp"),
        "unknown kid": auth.token(key=new_key()),
        "bad signature": f"{header}.{payload[:-4]}AAAA.{signature}",
        "alg none": jwt.encode({"iss": auth.issuer, "aud": auth.audience, "sub": "x", "exp": now + 60}, None,
                               algorithm="none", headers={"kid": key.kid}),
        "hs256 with the public key": hs256_with_public_key(auth),
        "a static token nobody configured": "static-token-nobody-configured-0123456789",
    }


def hs256_with_public_key(auth: AuthServer) -> str:
    key = auth.keys[0]
    secret = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = b64(json.dumps({"iss": auth.issuer, "aud": auth.audience, "sub": "x", "exp": int(time.time()) + 60}).encode())
    return (head + b"." + body + b"." + b64(hmac.new(secret, head + b"." + body, hashlib.sha256).digest())).decode()


def test_every_bad_token_is_401_invalid_token_and_reaches_nothing(setup: Setup, engine: Service) -> None:
    before = job_count(engine)
    for kind, token in bad_tokens(setup.auth).items():
        response = post(setup, token, tool_body("kb_addnote", {"text": "never stored", "collection": MEM}))
        assert response.status_code == 401, kind
        challenge = response.headers["WWW-Authenticate"]
        assert f'resource_metadata="{setup.metadata_url}"' in challenge, kind
        assert 'error="invalid_token"' in challenge, kind
    assert job_count(engine) == before


def test_a_jwt_whose_collections_claim_is_null_is_refused_and_reads_nothing(setup: Setup) -> None:
    """`"kb_collections": null` (a claim mapper with no value for this user) was read as no limit at all: the
    token listed and read every collection."""
    key = setup.auth.keys[0]
    now = int(time.time())
    claims = {"iss": setup.auth.issuer, "aud": setup.auth.audience, "sub": "unmapped-user", "exp": now + 300,
              "scope": "kb:read", "kb_collections": None}
    token = jwt.encode(claims, key.private, algorithm=key.algorithm, headers={"kid": key.kid})
    for body in (tool_body("kb_get", {"document_id": setup.docs["secret"]}), tool_body("kb_list", {"limit": 100})):
        response = post(setup, token, body)
        assert response.status_code == 401, response.text
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
        assert MARKER not in response.text


def test_subjects_sharing_their_first_200_characters_share_no_upload(setup: Setup) -> None:
    """Principal names were subjects cut to 200 characters, so another subject with the same start owned the
    first one's uploads (listed them, could finish or cancel them) and its tasks."""
    start = "https://idp.example/users/" + "u" * 200
    alice = setup.jwt(sub=start + "alice", scope="kb:read kb:write", kb_collections=[MEM])
    mallory = setup.jwt(sub=start + "mallory", scope="kb:read kb:write", kb_collections=[MEM])
    started = post(setup, alice, tool_body("kb_upload_start", {"filename": "alice-only.txt", "total_size": 5, "collection": MEM}))
    upload_id = started.json()["result"]["structuredContent"]["upload_id"]
    listed = post(setup, mallory, tool_body("kb_upload_status", {})).json()["result"]["structuredContent"]
    assert upload_id not in {u["upload_id"] for u in listed["uploads"]}
    cancelled = post(setup, mallory, tool_body("kb_upload_cancel", {"upload_id": upload_id})).json()
    assert cancelled["result"]["structuredContent"]["cancelled"] is False  # none of its own: nothing to cancel
    mine = post(setup, alice, tool_body("kb_upload_status", {"upload_id": upload_id})).json()["result"]
    assert not mine["isError"] and mine["structuredContent"]["upload_id"] == upload_id


def test_a_huge_bearer_token_is_refused_431_before_the_worker_holds_it(setup: Setup) -> None:
    """httptools bounds no request head: an 84 MB bearer token, sent within the head timeout, took a worker to
    253 MiB before auth could refuse it. Past 64 KiB the head is 431 and the connection closed, long before
    the token is all sent; the bridge goes on answering."""
    port = int(setup.bridge.url.rsplit(":", 1)[1])
    sent = 0
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer ")
        deadline = time.monotonic() + 30
        try:
            while sent < 64 * 1024 * 1024 and time.monotonic() < deadline:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass  # the bridge closed the connection: what is wanted
        sock.settimeout(10)
        try:
            answer = sock.recv(200)
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 431"), (answer, sent)
    assert sent < 16 * 1024 * 1024, sent  # refused long before the token was all sent
    response = post(setup, setup.jwt(scope="kb:read"), tool_body("kb_collections", {}))
    assert response.status_code == 200
    # A head just inside the bound is still read and answered (a 401 for a token nobody configured).
    near = post(setup, "x" * (60 * 1024), tool_body("kb_collections", {}))
    assert near.status_code == 401


# --- scopes ------------------------------------------------------------------------------------


async def test_tools_list_shows_only_what_the_scopes_allow(setup: Setup) -> None:
    expectations = {
        "kb:read": READ_TOOLS,
        "kb:read kb:write": READ_TOOLS | WRITE_TOOLS,
        "kb:read kb:write kb:delete": READ_TOOLS | WRITE_TOOLS | {"kb_delete"},
        "kb:delete": {"kb_delete"},
    }
    for scope, expected in expectations.items():
        async with connect(setup.bridge.url, setup.jwt(scope=scope)) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
        assert listed == expected, scope


@pytest.mark.parametrize(("scope", "tool", "arguments", "needed"), [
    ("kb:read", "kb_addnote", {"text": "x", "collection": MEM}, "kb:write"),
    ("kb:read kb:write", "kb_delete", {"document_id": 1}, "kb:delete"),
    ("kb:write", "kb_search", {"query": "x"}, "kb:read"),
    ("kb:read", "kb_upload_start", {"filename": "a.txt", "total_size": 1}, "kb:write"),
])
def test_a_call_without_its_scope_is_403_step_up(setup: Setup, engine: Service, scope: str, tool: str,
                                                 arguments: dict[str, Any], needed: str) -> None:
    before = job_count(engine)
    response = post(setup, setup.jwt(scope=scope), tool_body(tool, arguments))
    assert response.status_code == 403
    assert response.headers["WWW-Authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{needed}", resource_metadata="{setup.metadata_url}"'
    )
    assert job_count(engine) == before


def test_a_scope_claim_holding_another_kind_of_space_grants_no_kb_scope(setup: Setup, engine: Service) -> None:
    """A scope claim of "kb:read<U+00A0>kb:delete" (one scope, as an issuer that passes requested scopes through
    grants it) was split at the no-break space into kb:read and kb:delete."""
    token = setup.jwt(scope="kb:read\u00a0kb:delete")
    response = post(setup, token, tool_body("kb_delete", {"document_id": setup.docs["mem2"]}))
    assert response.status_code == 403
    assert engine_document(engine, setup.docs["mem2"]) is not None


def test_delete_needs_kb_delete_and_the_document_stays(setup: Setup, engine: Service) -> None:
    response = post(setup, setup.jwt(scope="kb:read kb:write"), tool_body("kb_delete", {"document_id": setup.docs["mem2"]}))
    assert response.status_code == 403
    assert engine_document(engine, setup.docs["mem2"]) is not None


def test_resources_need_kb_read(setup: Setup) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read",
            "params": {"uri": f"kb://document/{setup.docs['mem']}", "_meta": MODERN_META}}
    response = post(setup, setup.jwt(scope="kb:write"), body)
    assert response.status_code == 403
    assert 'scope="kb:read"' in response.headers["WWW-Authenticate"]


# --- collection limits, on every tool ------------------------------------------------------------




def limited_tokens(setup: Setup) -> list[tuple[str, str, set[str]]]:
    """(label, token, the collections it sees): a JWT limited by kb_collections, and a static named token
    limited to two collections."""
    return [
        ("jwt", setup.jwt(sub="memory-agent", kb_collections=[MEM]), {MEM}),
        ("static", setup.pair, {MEM, NOTES}),
    ]


async def test_collection_limits_on_the_read_tools(setup: Setup) -> None:
    visible_of = {MEM: {"mem", "mem2"}, NOTES: {"notes"}}
    for label, token, collections in limited_tokens(setup):
        visible = {setup.docs[n] for c in collections for n in visible_of[c]}
        hidden = set(setup.docs.values()) - visible
        async with connect(setup.bridge.url, token) as client:
            found = await call(client, "kb_search", {"query": MARKER, "top": 50})
            ids = {hit["document_id"] for hit in found["results"]}
            assert ids == visible, label
            for mode in ("fts", "vector"):
                found = await call(client, "kb_search", {"query": MARKER, "top": 50, "mode": mode})
                assert not {hit["document_id"] for hit in found["results"]} & hidden, (label, mode)
            assert (await call(client, "kb_search", {"query": MARKER, "collection": SECRET}))["results"] == []

            for document_id in hidden:
                assert await error_of(client, "kb_get", {"document_id": document_id}) == "NOT_FOUND"
            assert (await call(client, "kb_get", {"source_path": f"authz/secret-{SUFFIX}.md"}))["documents"] == []
            mine = await call(client, "kb_get", {"source_path": f"authz/mem-{SUFFIX}.md"})
            assert [d["id"] for d in mine["documents"]] == [setup.docs["mem"]]

            listed = await call(client, "kb_list", {"limit": 100})
            listed_ids = {d["id"] for d in listed["documents"]}
            assert visible <= listed_ids and not listed_ids & hidden, label
            assert listed["total"] == len(listed["documents"])
            assert {d["collection"] for d in listed["documents"]} <= collections
            secret_list = await call(client, "kb_list", {"collection": SECRET})
            assert secret_list["documents"] == [] and secret_list["total"] == 0

            # Page by page (one per page): every visible document exactly once, in update order.
            seen: list[int] = []
            cursor = None
            while True:
                page = await call(client, "kb_list", {"limit": 1, **({"cursor": cursor} if cursor else {})})
                seen += [d["id"] for d in page["documents"]]
                assert page["total"] == listed["total"]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == [d["id"] for d in listed["documents"]], label

            names = {c["name"] for c in (await call(client, "kb_collections", {}))["collections"]}
            assert names == collections, label
            assert await error_of(client, "kb_collections", {"name": SECRET}) == "NOT_FOUND"
            counted = (await call(client, "kb_collections", {"name": MEM}))["collections"][0]
            assert counted["documents"] == 2

            assert await error_of(client, "kb_related", {"document_id": setup.docs["secret"]}) == "NOT_FOUND"
            related = await call(client, "kb_related", {"document_id": setup.docs["mem"], "top": 10})
            assert not {hit["document_id"] for hit in related["results"]} & hidden, label

            jobs = await call(client, "kb_jobs", {"limit": 100})
            assert all(job["document_id"] in visible or job["document_id"] not in hidden for job in jobs["jobs"])
            assert all(job["document_id"] != setup.docs["secret"] for job in jobs["jobs"])

            status = await call(client, "kb_status", {})
            assert "documents" not in status["engine"] and "chunks" not in status["engine"]


async def test_a_limited_kb_list_walk_neither_skips_nor_repeats_while_notes_change(setup: Setup) -> None:
    """kb_list's cursor against the real engine (3.14 `after`), merged over two collections of this test's own:
    after the first page a seen note is deleted; after the second another seen one is updated and a new one
    added. By offsets per collection the walk was 5, 4, 3, 1, 1, 0 (of notes 0 to 5): 2 skipped, 1 repeated."""
    walk_a, walk_b = f"authz-walk-a-{SUFFIX}", f"authz-walk-b-{SUFFIX}"

    def add(n: int, collection: str) -> int:
        added = admin_call(setup.bridge.url, "kb_addnote", {
            "text": f"{MARKER} walk note {n} kept in {collection}.", "collection": collection, "wait": True})
        assert added["status"] == "done", added
        return int(added["document_id"])

    ids = [add(n, walk_a if n % 2 else walk_b) for n in range(6)]
    newest_first = ids[::-1]
    async with connect(setup.bridge.url, setup.jwt(sub="walker", kb_collections=[walk_a, walk_b])) as client:
        first = await call(client, "kb_list", {"limit": 2})
        assert [d["id"] for d in first["documents"]] == newest_first[:2] and first["total"] == 6
        seen: list[int] = []
        page, pages = first, 1
        while True:
            seen += [d["id"] for d in page["documents"]]
            if pages == 1:
                admin_call(setup.bridge.url, "kb_delete", {"document_id": newest_first[1]})
            if pages == 2:
                admin_call(setup.bridge.url, "kb_update_note", {"document_id": newest_first[0], "title": "walked past"})
                added = add(6, walk_a)
            if page["next_cursor"] is None:
                break
            page, pages = await call(client, "kb_list", {"limit": 2, "cursor": page["next_cursor"]}), pages + 1
        assert seen == newest_first, seen
        # What changed meanwhile (the update, the new note) is found by updated_since the walk's start.
        since = await call(client, "kb_list", {"updated_since": first["documents"][0]["updated_at"]})
        assert [d["id"] for d in since["documents"]][:2] == [added, newest_first[0]]


async def test_collection_limits_on_resources(setup: Setup) -> None:
    token = setup.jwt(sub="memory-agent", kb_collections=[MEM])
    async with connect(setup.bridge.url, token) as client:
        listed = await client.list_resources()
        uris = {str(r.uri) for r in listed.resources}
        assert f"kb://document/{setup.docs['mem']}" in uris
        assert f"kb://document/{setup.docs['secret']}" not in uris
        assert f"kb://document/{setup.docs['notes']}" not in uris
        text = (await client.read_resource(f"kb://document/{setup.docs['mem']}")).contents[0].text
        assert MARKER in text
        for uri in (f"kb://document/{setup.docs['secret']}", f"kb://collection/{SECRET}"):
            with pytest.raises(Exception) as caught:
                await client.read_resource(uri)
            assert "not found" in str(caught.value).lower() or "no documents" in str(caught.value).lower()
        collection = (await client.read_resource(f"kb://collection/{MEM}")).contents[0].text
        assert "2 document(s)" in collection


async def test_collection_limits_on_the_write_tools(setup: Setup, engine: Service) -> None:
    token = setup.jwt(sub="memory-agent", kb_collections=[MEM])
    secret_id = setup.docs["secret"]
    secret_before = engine_document(engine, secret_id)
    jobs_before = job_count(engine)
    async with connect(setup.bridge.url, token) as client:
        assert await error_of(client, "kb_addnote", {"text": "leak", "collection": SECRET}) == "FORBIDDEN"
        assert await error_of(client, "kb_addnote", {"text": "leak"}) == "FORBIDDEN"  # the default collection is not its own
        assert await error_of(client, "kb_upload_start", {"filename": "a.txt", "total_size": 3, "collection": SECRET}) == "FORBIDDEN"
        assert job_count(engine) == jobs_before

        assert await error_of(client, "kb_update_note", {"document_id": secret_id, "text": "overwritten"}) == "NOT_FOUND"
        assert await error_of(client, "kb_update_note", {"document_id": secret_id, "collection": MEM}) == "NOT_FOUND"
        assert await error_of(client, "kb_update_note", {"document_id": setup.docs["mem2"], "collection": SECRET}) == "FORBIDDEN"
        deleted = await call(client, "kb_delete", {"document_id": secret_id})
        assert deleted["deleted"] is False

        secret_after = engine_document(engine, secret_id)
        assert secret_after is not None and secret_before is not None
        assert secret_after["version"] == secret_before["version"] and secret_after["tags"] == secret_before["tags"]
        mem2 = engine_document(engine, setup.docs["mem2"])
        assert mem2 is not None and f"collection:{MEM}" in mem2["tags"]

        # Its own collection works: add, update, delete.
        added = await call(client, "kb_addnote", {"text": f"{MARKER} scratch", "collection": MEM, "wait": True})
        updated = await call(client, "kb_update_note", {"document_id": added["document_id"], "text": f"{MARKER} scratch 2"})
        assert updated["version"] == 2
        assert (await call(client, "kb_delete", {"document_id": added["document_id"]}))["deleted"] is True


def test_one_subjects_narrower_token_neither_finishes_nor_reads_what_a_wider_one_started(setup: Setup, engine: Service) -> None:
    """One person, two clients (README, "Hardcoded claim on a client"): a token for MEM and NOTES, and one limited
    to MEM, or holding only kb:read. Uploads and tasks are owned by the subject with its reach: the narrow token
    could otherwise finish the wide one's upload into NOTES, writing its own bytes where it may not write, and
    the read-only one could cancel the wide one's task."""
    sub, own, other_one = f"two-clients-{SUFFIX}", f"authz-two-a-{SUFFIX}", f"authz-two-b-{SUFFIX}"  # no other test's
    wide = setup.jwt(sub=sub, scope="kb:read kb:write", kb_collections=[own, other_one])
    narrow = setup.jwt(sub=sub, scope="kb:read kb:write", kb_collections=[own])
    reader = setup.jwt(sub=sub, scope="kb:read", kb_collections=[own, other_one])
    jobs_before = job_count(engine)

    started = modern_call(setup.bridge.url, wide, "kb_upload_start", {"filename": "planted.txt", "total_size": 5, "collection": other_one})
    upload_id = started["result"]["structuredContent"]["upload_id"]  # type: ignore[index]
    listed = modern_call(setup.bridge.url, narrow, "kb_upload_status", {})
    assert listed["result"]["structuredContent"]["uploads"] == []  # type: ignore[index]
    chunk = {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(b"plant").decode()}
    for tool, arguments in (("kb_upload_chunk", chunk), ("kb_upload_finish", {"upload_id": upload_id})):
        assert error_code(modern_call(setup.bridge.url, narrow, tool, arguments)) == "NOT_FOUND"
    assert job_count(engine) == jobs_before

    tasks_meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    made = post(setup, wide, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "kb_addnote", "arguments": {"text": "a task of two clients", "collection": own}, "_meta": tasks_meta}}).json()
    task_id = made["result"]["taskId"]
    for method in ("tasks/get", "tasks/cancel"):
        body = {"jsonrpc": "2.0", "id": 2, "method": method, "params": {"taskId": task_id, "_meta": tasks_meta}}
        headers = {"Mcp-Name": task_id}
        for other in (narrow, reader):
            answer = requests.post(setup.bridge.url + "/mcp", json=body, timeout=30, headers={
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Authorization": f"Bearer {other}", **headers}).json()
            assert answer["error"]["code"] == -32602, (method, answer)
    assert error_code(modern_call(setup.bridge.url, wide, "kb_upload_cancel", {"upload_id": upload_id})) is None


def test_a_body_nested_deeper_than_the_parser_goes_is_a_parse_error_for_every_token(setup: Setup) -> None:
    """The scope door reads the body of a token without every scope before the SDK does; Python's parser gives up
    on deep nesting with RecursionError, which once escaped the door as HTTP 500. 50,000 deep: far beyond the
    parser, within the door's count of a message's values (deeper is refused by that count, -32600:
    tests/test_envelope.py)."""
    deep = b"[" * 50_000 + b"]" * 50_000
    for token in (ADMIN, setup.reader, setup.jwt(sub=f"deep-{SUFFIX}", scope="kb:read")):
        answer = requests.post(setup.bridge.url + "/mcp", data=deep, timeout=30, headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28", "Authorization": f"Bearer {token}"})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700, (answer.status_code, answer.text[:200])


# --- static tokens, logs -----------------------------------------------------------------------


async def test_static_named_tokens_as_printed_by_token_new(setup: Setup) -> None:
    async with connect(setup.bridge.url, setup.reader) as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
        found = await call(client, "kb_search", {"query": MARKER, "top": 50})
        assert {hit["document_id"] for hit in found["results"]} == {setup.docs["mem"], setup.docs["mem2"]}
    response = post(setup, setup.reader, tool_body("kb_addnote", {"text": "x", "collection": MEM}))
    assert response.status_code == 403
    assert response.headers["WWW-Authenticate"].startswith('Bearer error="insufficient_scope", scope="kb:write"')


async def test_the_api_key_stays_full_access(setup: Setup) -> None:
    async with connect(setup.bridge.url, ADMIN) as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS | WRITE_TOOLS | {"kb_delete"}
        names = {c["name"] for c in (await call(client, "kb_collections", {}))["collections"]}
        assert {MEM, NOTES, SECRET} <= names


async def test_logs_name_the_principal_and_never_a_token(setup: Setup) -> None:
    jwt_token = setup.jwt(sub=f"log-subject-{SUFFIX}", kb_collections=[MEM])
    async with connect(setup.bridge.url, jwt_token) as client:
        await call(client, "kb_search", {"query": MARKER})
    async with connect(setup.bridge.url, setup.reader) as client:
        await call(client, "kb_search", {"query": MARKER})

    def logged() -> bool:
        return f'"caller": "log-subject-{SUFFIX}"' in setup.bridge.log() and '"caller": "reader"' in setup.bridge.log()

    wait_until(logged, 10, what="both principals in the access log")
    log = setup.bridge.log_path.read_text()
    for secret in (jwt_token, jwt_token.split(".")[2], setup.reader, setup.pair, ADMIN):
        assert secret not in log


# --- keys ----------------------------------------------------------------------------------------


def test_key_rotation_a_new_key_is_accepted_within_a_minute(setup: Setup) -> None:
    key = setup.auth.rotate(keep_old=True)
    token = setup.auth.token(key=key)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
    # Each worker fetches the new key set at its own pace, at most once per REFETCH_INTERVAL: ask until
    # both have answered 200 a few times in a row.
    ok_in_a_row = [0]

    def accepted() -> bool:
        ok_in_a_row[0] = ok_in_a_row[0] + 1 if post(setup, token, body).status_code == 200 else 0
        return ok_in_a_row[0] >= 6

    wait_until(accepted, 60, interval=0.5, what="the rotated key to be accepted")


def test_a_burst_of_unknown_kids_costs_far_fewer_fetches(setup: Setup) -> None:
    before = setup.auth.jwks_fetches
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
    for _ in range(30):
        assert post(setup, setup.auth.token(key=new_key()), body).status_code == 401
    # At most one fetch per worker per window (two workers), whatever the burst.
    assert setup.auth.jwks_fetches - before <= 4


# --- other configurations ---------------------------------------------------------------------------


def test_oidc_discovery_and_the_audience_override(engine: Service, tmp_path: Path) -> None:
    auth = AuthServer(discovery="oidc", issuer_path="/realms/kb", audience="api://kb-bridge").start()
    try:
        env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_OAUTH_ISSUER": auth.issuer,
               "KB_PUBLIC_URL": "https://kb.example.test", "KB_OAUTH_AUDIENCE": "api://kb-bridge"}
        bridge = start_bridge(tmp_path, env, workers=1)
        try:
            assert modern_call(bridge.url, auth.token(), "kb_status", {})["result"]["isError"] is False  # type: ignore[index]
            wrong = requests.post(bridge.url + "/mcp", json=tool_body("kb_status", {}), timeout=10, headers={
                "Authorization": f"Bearer {auth.token(aud='https://kb.example.test/mcp')}",
                "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28"})
            assert wrong.status_code == 401
            metadata = requests.get(bridge.url + "/.well-known/oauth-protected-resource", timeout=10).json()
            assert metadata["resource"] == "https://kb.example.test/mcp"
            assert auth.requests["/realms/kb/.well-known/openid-configuration"] >= 1
        finally:
            bridge.stop()
    finally:
        auth.stop()


def test_jwks_url_override(engine: Service, tmp_path: Path) -> None:
    auth = AuthServer(discovery="none").start()  # no metadata at all: only the key set
    try:
        public = f"http://127.0.0.1:{free_port()}"
        auth.audience = public + "/mcp"
        env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_OAUTH_ISSUER": auth.issuer,
               "KB_PUBLIC_URL": public, "KB_OAUTH_JWKS_URL": auth.jwks_uri}
        bridge = start_bridge(tmp_path, env, workers=1)
        try:
            assert modern_call(bridge.url, auth.token(), "kb_status", {})["result"]["isError"] is False  # type: ignore[index]
        finally:
            bridge.stop()
    finally:
        auth.stop()


def test_an_unreachable_issuer_is_logged_and_keeps_the_door_shut(engine: Service, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    public = f"http://127.0.0.1:{free_port()}"
    auth = AuthServer(audience=public + "/mcp")  # never started: its keys sign, nobody publishes them
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_OAUTH_ISSUER": dead, "KB_PUBLIC_URL": public,
           "KB_MCP_API_KEY": ADMIN}
    bridge = start_bridge(tmp_path, env, workers=1)
    try:
        wait_until(lambda: "cannot fetch the OAuth issuer's signing keys" in bridge.log(), 20, what="the issuer problem logged")
        assert "retrying" in bridge.log()
        token = auth.token(iss=dead)
        response = requests.post(bridge.url + "/mcp", json=tool_body("kb_status", {}), timeout=10, headers={
            "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28"})
        assert response.status_code == 401
        assert modern_call(bridge.url, ADMIN, "kb_status", {})["result"]["isError"] is False  # type: ignore[index]
    finally:
        bridge.stop()
        auth.stop()


@pytest.mark.parametrize(("content", "named"), [
    ('[[token]]\nname = "ok"\nsha256 = "' + "a" * 64 + '"\nscopes = ["kb:read"]\n\n[[token]]\nname = "bad"\nsha256 = "xyz"\nscopes = ["kb:read"]\n',
     "token #2 ('bad')"),
    ('[[token]]\nname = "wide"\nsha256 = "' + "b" * 64 + '"\nscopes = ["kb:admin"]\n', "token #1 ('wide')"),
])
def test_a_tokens_file_with_a_bad_entry_stops_the_bridge_naming_it(tmp_path: Path, content: str, named: str) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(content)
    path.chmod(0o600)  # so that only the bad entry, not the file's mode, stops the bridge
    done = subprocess.run([sys.executable, "-m", "kb_bridge", "serve"], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=clean_env({"KB_MCP_TOKENS_FILE": str(path), "KB_BIND": f"127.0.0.1:{free_port()}"}))
    assert done.returncode == 2
    assert "KB_MCP_TOKENS_FILE" in done.stderr and named in done.stderr
    assert re.search(r"sha256|scope", done.stderr)


# --- the TypeScript SDK client (Inspector, Claude Code) with an access token ---------------------------


def test_typescript_client_with_a_limited_read_only_token(node: str, setup: Setup, tmp_path: Path) -> None:
    token = setup.jwt(sub="ts-agent", scope="kb:read", kb_collections=[MEM])
    plan = [
        Step("listTools"),
        ts_tool("kb_search", {"query": MARKER, "top": 20}),
        ts_tool("kb_get", {"document_id": setup.docs["secret"]}, "NOT_FOUND"),
        ts_tool("kb_collections", {}),
        ts_tool("kb_addnote", {"text": "x", "collection": MEM}),  # 403: the client throws
    ]
    outputs = run_ts(node, {"kind": "http", "url": setup.bridge.url + "/mcp", "token": token}, plan, tmp_path)
    assert {t["name"] for t in outputs[0]["result"]["tools"]} == READ_TOOLS
    hits = outputs[1]["result"]["structuredContent"]["results"]
    assert {h["document_id"] for h in hits} == {setup.docs["mem"], setup.docs["mem2"]}
    assert outputs[2]["result"]["isError"] is True and outputs[2]["result"]["content"][0]["text"].startswith("NOT_FOUND: ")
    assert [c["name"] for c in outputs[3]["result"]["structuredContent"]["collections"]] == [MEM]
    assert outputs[4]["ok"] is False and "insufficient_scope" in outputs[4]["error"]["message"]


# --- kb_status for a collection-limited token (issue 32, item 6) -----------------------------------------

# Everything a collection-limited token may see of the engine's status, as dotted paths to the values it may
# carry: what the engine is and can do. No count of any kind (documents, chunks, vectors, the queue, the
# indexes) may appear: each would tell what the other collections hold.
LIMITED_STATUS_PATHS = {
    "bridge.version", "engine.version", "engine.api", "engine.device", "engine.search_modes", "engine.store",
    "engine.model", "engine.model.name", "engine.model.dim", "engine.model.batch_size",
    "engine.model.document_workers", "engine.model.precision.documents", "engine.model.precision.queries",
    "engine.embedder.state", "engine.embedder.reason",
}


def leaf_paths(value: Any, prefix: str = "") -> set[str]:
    """The dotted paths of every value in a JSON result that is not itself an object."""
    if isinstance(value, dict) and value:
        return {path for key, item in value.items() for path in leaf_paths(item, f"{prefix}.{key}" if prefix else key)}
    return {prefix}


async def test_a_collection_limited_kb_status_carries_no_count_of_the_engine(setup: Setup, engine: Service) -> None:
    full = requests.get(engine.url + "/api/v1/status", headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10).json()
    assert "indexes" in full  # the real local engine reports nested counts beyond docs/engine-api.md
    for label, token, _collections in limited_tokens(setup):
        async with connect(setup.bridge.url, token) as client:
            result = await client.call_tool("kb_status", {})
        assert not result.is_error, label
        paths = leaf_paths(result.structured_content)
        assert paths <= LIMITED_STATUS_PATHS, (label, sorted(paths - LIMITED_STATUS_PATHS))
        assert {"engine.version", "engine.search_modes"} <= paths, label  # the engine's description is still there
        text = result.content[0].text
        assert "Documents:" not in text and "chunks" not in text and "Queue:" not in text, (label, text)
    # A full-access token still gets the engine's whole status, nested counts included.
    whole = admin_call(setup.bridge.url, "kb_status", {})
    assert "indexes" in whole["engine"] and "documents" in whole["engine"]


def stdio_upload_start(env: dict[str, str], filename: str) -> str:
    """The stdio user (the local principal) starts an upload through `kb-bridge stdio`: its upload id."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "kb_upload_start", "arguments": {"filename": filename, "total_size": 5}}},
    ]
    done = subprocess.run(START_COMMANDS["stdio"], input="".join(json.dumps(m) + "\n" for m in messages), env=clean_env(env),
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    reply = next(r for r in map(json.loads, done.stdout.splitlines()) if r.get("id") == 2)
    assert not reply["result"]["isError"], reply
    return str(reply["result"]["structuredContent"]["upload_id"])


def test_a_named_token_called_local_owns_nothing_the_stdio_user_staged(engine: Service, tmp_path: Path) -> None:
    """A static principal was owned by its bare name, so a tokens-file entry named "local" owned what the stdio
    user staged in the same KB_UPLOAD_DIR (the default is one directory for both): it listed those uploads and
    could finish or cancel them."""
    uploads = str(tmp_path / "uploads")
    token, entry = token_new("local", "--scopes", "kb:read,kb:write")
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text(entry)
    tokens_file.chmod(0o600)
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_UPLOAD_DIR": uploads}
    upload_id = stdio_upload_start(env, "local-diary.txt")
    bridge = start_bridge(tmp_path, {**env, "KB_MCP_TOKENS_FILE": str(tokens_file)}, workers=1)
    try:
        listed = modern_call(bridge.url, token, "kb_upload_status", {})["result"]["structuredContent"]  # type: ignore[index]
        assert upload_id not in {u["upload_id"] for u in listed["uploads"]}
        cancelled = modern_call(bridge.url, token, "kb_upload_cancel", {"upload_id": upload_id})
        assert cancelled["result"]["structuredContent"]["cancelled"] is False  # type: ignore[index]
    finally:
        bridge.stop()


# --- a tokens file others can write (issue 32, item 14) ---------------------------------------------------

START_COMMANDS = {
    "serve": [sys.executable, "-m", "kb_bridge", "serve"],
    "gunicorn": [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "kb_bridge.asgi:app"],
    "check": [sys.executable, "-m", "kb_bridge", "check"],
    "stdio": [sys.executable, "-m", "kb_bridge", "stdio"],
}


def started_as(command: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The bridge started as a person starts it, expected to refuse (stdio gets no input: it ends at once)."""
    full = clean_env({"KB_BIND": f"127.0.0.1:{free_port()}", "KB_WORKERS": "1", "KB_UPLOAD_DIR": str(tmp_path / "uploads"),
                      "KB_ENGINE_URL": "http://127.0.0.1:9", **env})
    return subprocess.run(START_COMMANDS[command], env=full, cwd=REPO, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def tokens_file_with_mode(tmp_path: Path, mode: int) -> tuple[Path, str]:
    """A good tokens file with this mode, and the token its one entry accepts."""
    token = "named-token-" + "x" * 32
    entry = ('[[token]]\nname = "reader"\nsha256 = "' + hashlib.sha256(token.encode()).hexdigest()
             + '"\nscopes = ["kb:read"]\n')
    path = tmp_path / f"tokens-{mode:o}.toml"
    path.write_text(entry)
    path.chmod(mode)
    return path, token


@pytest.mark.parametrize(("command", "mode"), [
    ("serve", "0664"), ("serve", "0646"), ("gunicorn", "0664"), ("gunicorn", "0602"), ("check", "0664"), ("stdio", "0664"),
])
def test_a_tokens_file_others_can_write_stops_the_bridge_naming_it_and_its_mode(tmp_path: Path, command: str, mode: str) -> None:
    path, _token = tokens_file_with_mode(tmp_path, int(mode, 8))
    done = started_as(command, {"KB_MCP_TOKENS_FILE": str(path)}, tmp_path)
    assert done.returncode != 0, (command, done.stderr[-2000:])
    assert "KB_MCP_TOKENS_FILE" in done.stderr and f"mode {mode}" in done.stderr, (command, done.stderr[-2000:])
    assert "writable by group or others" in done.stderr


@pytest.mark.parametrize("mode", ["0600", "0640", "0644"])
def test_a_tokens_file_only_its_owner_can_write_is_accepted(tmp_path: Path, mode: str) -> None:
    # Readable by a group (or anyone) is fine: the file holds only the tokens' SHA-256 digests.
    path, token = tokens_file_with_mode(tmp_path, int(mode, 8))
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_TOKENS_FILE": str(path)}, workers=1)
        try:
            reply = modern_call(bridge.url, token, "kb_status", {})
            assert reply["result"]["isError"] is False, reply  # type: ignore[index]
        finally:
            bridge.stop()


# --- the OAuth issuer must be https, or http on loopback (issue 32, item 15) ----------------------------------


@pytest.mark.parametrize("issuer", ["http://127.kb-issuer.invalid", "http://localhost.kb-issuer.invalid/realms/kb",
                                    "http://127.0.0.1.nip.io"])
def test_an_http_issuer_off_loopback_stops_the_bridge_naming_the_setting(tmp_path: Path, issuer: str) -> None:
    env = {"KB_OAUTH_ISSUER": issuer, "KB_PUBLIC_URL": "https://kb.example.test"}
    for command in ("serve", "gunicorn"):
        done = started_as(command, env, tmp_path)
        assert done.returncode != 0, (command, done.stderr[-2000:])
        assert "KB_OAUTH_ISSUER" in done.stderr and "https" in done.stderr, (command, done.stderr[-2000:])


# --- the console: a session lasts as long as its token; jobs by collection (issue 32, items 3, 4, 5) ------


def engine_job(engine: Service, job_id: int) -> dict[str, Any]:
    response = requests.get(f"{engine.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {ENGINE_KEY}"},
                            timeout=10)
    return dict(response.json())


def ended(engine: Service, job_id: int) -> dict[str, Any]:
    """The job once it is done or failed (polled with a deadline)."""
    found: dict[str, Any] = {}

    def finished() -> bool:
        found.update(engine_job(engine, job_id))
        return found["status"] in ("done", "failed")

    wait_until(finished, 120, interval=0.2, what=f"job {job_id} to end")
    return found


def mcp_upload(url: str, token: str, filename: str, data: bytes, collection: str) -> int:
    """A file through the three upload tools, as an agent sends it: the engine job's id."""
    def ok(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result: Any = modern_call(url, token, tool, arguments)["result"]
        assert not result.get("isError"), result
        return dict(result["structuredContent"])

    upload_id = ok("kb_upload_start", {"filename": filename, "total_size": len(data), "collection": collection})["upload_id"]
    ok("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(data).decode()})
    return int(ok("kb_upload_finish", {"upload_id": upload_id})["job_id"])


BROKEN_PDF = b"%PDF-1.4 not really a pdf"  # its job fails: a job that never gets a document


def test_a_console_session_ends_when_its_jwt_expires(setup: Setup) -> None:
    ui = setup.bridge.url + "/ui"
    # Expired a moment ago, still inside the verifier's clock-skew leeway: no session for it at all.
    with pytest.raises(AssertionError, match="sign-in refused"):
        ConsoleClient(ui, setup.jwt(sub=f"late-{SUFFIX}", exp=int(time.time()) - 5))
    expires = int(time.time()) + 15
    console = ConsoleClient(ui, setup.jwt(sub=f"console-{SUFFIX}", exp=expires))
    assert console.get("/search").status_code == 200
    # The session ends with the token: by its exp (not 8 hours later, nor the verifier's 60 s leeway after).
    wait_until(lambda: ConsoleClient.signed_out(console.get("/search")), max(1.0, expires - time.time()) + 20,
               interval=0.5, what="the console session to end with its token")
    assert time.time() >= expires - 1
    assert ConsoleClient.signed_out(console.get("/collections"))
    assert ConsoleClient.signed_out(console.post("/sign-out", {}))


def test_console_jobs_are_visible_by_collection_never_by_cookie(setup: Setup, engine: Service) -> None:
    # Another collection's job without a document (its file failed to parse): its file name and error must not leak.
    secret_job = mcp_upload(setup.bridge.url, ADMIN, f"secret-{SUFFIX}.pdf", BROKEN_PDF, SECRET)
    assert ended(engine, secret_job)["document_id"] is None
    token = setup.jwt(sub=f"console-mem-{SUFFIX}", kb_collections=[MEM])
    console = ConsoleClient(setup.bridge.url + "/ui", token)
    forged = {"kb_console_jobs": str(secret_job)}  # the cookie the console once trusted
    missing = console.get("/jobs/987654321", json=True)
    for as_json in (False, True):
        answer = console.get(f"/jobs/{secret_job}", json=as_json, cookies=forged)
        assert answer.status_code == 404, answer.text
        assert f"secret-{SUFFIX}" not in answer.text and "pdf" not in answer.text.lower()
    assert console.get(f"/jobs/{secret_job}", json=True).json()["error"] == missing.json()["error"].replace(
        "987654321", str(secret_job))  # the very answer a missing job gets

    # Its own upload into its own collection, through the console: visible while it has no document and after.
    sent = console.upload(f"mine-{SUFFIX}.pdf", BROKEN_PDF, MEM)
    assert sent.status_code == 200, sent.text
    mine = int(sent.json()["job"]["id"])
    assert ended(engine, mine)["document_id"] is None
    fresh = ConsoleClient(setup.bridge.url + "/ui", token)  # a new session: nothing remembered of the upload
    page = fresh.get(f"/jobs/{mine}")
    assert page.status_code == 200 and f"mine-{SUFFIX}.pdf" in page.text
    assert fresh.get(f"/jobs/{mine}", json=True).json()["collection"] == MEM
    listing = fresh.get("/jobs").text
    assert f"mine-{SUFFIX}.pdf" in listing and f"secret-{SUFFIX}" not in listing
    # kb_jobs applies the same rule.
    reply: Any = modern_call(setup.bridge.url, token, "kb_jobs", {"limit": 100})
    ids = {job["id"] for job in reply["result"]["structuredContent"]["jobs"]}
    assert mine in ids and secret_job not in ids


def test_the_console_job_pages_need_kb_read(setup: Setup, engine: Service) -> None:
    job_id = mcp_upload(setup.bridge.url, ADMIN, f"plain-{SUFFIX}.md", b"# Plain\n\nplain words", MEM)
    ended(engine, job_id)
    writer = ConsoleClient(setup.bridge.url + "/ui", setup.jwt(sub=f"writer-{SUFFIX}", scope="kb:write"))
    for path in (f"/jobs/{job_id}", "/jobs"):
        for as_json in (False, True):
            answer = writer.get(path, json=as_json)
            assert answer.status_code == 403, (path, as_json, answer.text)
            assert "lacks the kb:read scope" in answer.text and f"plain-{SUFFIX}" not in answer.text
    assert "/ui/jobs" not in writer.get("/search").text  # and no Jobs link to follow


# --- the issuer's metadata and keys never come over a redirect from https to http (issue 32, item 17) ----------


@pytest.mark.parametrize(("moved", "to", "accepted"), [
    ("/jwks", "https", True),  # the control: a redirect within https is followed (and this TLS setup works)
    ("/jwks", "http", False),
    ("/.well-known/oauth-authorization-server", "http", False),
])
def test_the_bridge_never_follows_a_redirect_from_https_to_http_for_the_issuers_keys(
        engine: Service, tmp_path: Path, moved: str, to: str, accepted: bool) -> None:
    """A real https issuer on loopback (a self-signed certificate the bridge trusts through REQUESTS_CA_BUNDLE, as
    an operator trusts a private CA) whose metadata or key set answers 302 to a plain-http twin serving the same
    documents: following it would let anyone on the path between the bridge and the twin choose the keys."""
    certificate = self_signed_certificate(tmp_path)
    public = f"http://127.0.0.1:{free_port()}"
    secure = AuthServer(audience=public + "/mcp", tls=certificate).start()
    plain = AuthServer(mirror_of=secure).start()
    secure.redirects[moved] = (plain.base + moved) if to == "http" else (secure.base + moved + "?moved")
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_OAUTH_ISSUER": secure.issuer, "KB_PUBLIC_URL": public,
           "REQUESTS_CA_BUNDLE": str(certificate.cert)}
    bridge = start_bridge(tmp_path, env, workers=1)
    try:
        response = requests.post(bridge.url + "/mcp", json=tool_body("kb_status", {}), timeout=30, headers={
            "Authorization": f"Bearer {secure.token()}", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "kb_status"})
        assert response.status_code == (200 if accepted else 401), (response.status_code, bridge.log()[-2000:])
        assert secure.requests[moved] >= 1
        assert sum(plain.requests.values()) == 0, plain.requests  # the http twin was never asked
        if not accepted:
            assert "cannot fetch the OAuth issuer's signing keys" in bridge.log() and "redirect" in bridge.log()
    finally:
        bridge.stop()
        secure.stop()
        plain.stop()


def test_a_note_moved_into_a_limited_tokens_collection_brings_none_of_the_versions_kept_elsewhere(setup: Setup) -> None:
    """A note written in one collection, rewritten and moved into another: a token limited to the second reads
    the note as it is now and its versions there, never the text it held in the first (the review's leak:
    kb_get version=1 answered the first collection's text, and the console's version page with it)."""
    before, after = f"authz-hist-b-{SUFFIX}", f"authz-hist-a-{SUFFIX}"  # no other test's
    wide = setup.jwt(sub=f"hist-wide-{SUFFIX}", scope="kb:read kb:write", kb_collections=[before, after])
    narrow = setup.jwt(sub=f"hist-narrow-{SUFFIX}", scope="kb:read", kb_collections=[after])
    secret = f"the vault code {MARKER} is 99-1234"
    added = modern_call(setup.bridge.url, wide, "kb_addnote", {"text": secret, "collection": before, "wait": True})
    note = int(added["result"]["structuredContent"]["document_id"])  # type: ignore[index]
    for change in ({"text": f"a launch is planned {MARKER}"}, {"collection": after}):
        assert error_code(modern_call(setup.bridge.url, wide, "kb_update_note", {"document_id": note, **change})) is None

    def versions(token: str) -> dict[int, str | None]:
        got = modern_call(setup.bridge.url, token, "kb_get", {"document_id": note})["result"]["structuredContent"]  # type: ignore[index]
        return {v["version"]: v.get("changed_by") for v in got["documents"][0]["versions"]}

    everything = versions(wide)
    assert len(everything) >= 2 and min(everything) == 1
    first = modern_call(setup.bridge.url, wide, "kb_get", {"document_id": note, "version": 1})
    assert first["result"]["structuredContent"]["documents"][0]["content"] == secret  # type: ignore[index]
    seen = versions(narrow)
    assert 1 not in seen and set(seen) < set(everything)
    refused = modern_call(setup.bridge.url, narrow, "kb_get", {"document_id": note, "version": 1})
    assert error_code(refused) == "NOT_FOUND" and MARKER not in json.dumps(refused)
    for number in seen:  # each version it is shown, it can read, and none holds the first collection's text
        read = modern_call(setup.bridge.url, narrow, "kb_get", {"document_id": note, "version": number})
        assert read["result"]["structuredContent"]["documents"][0]["collection"] == after  # type: ignore[index]
        assert "99-1234" not in json.dumps(read)


def test_a_write_only_token_reads_nothing_through_its_writes(setup: Setup) -> None:
    """kb:write without kb:read: adding a note lists no similar notes (their titles and text), and an update
    answers only the note's id, version, time and what the call set; a move to where a note already is changed
    nothing and answered the whole note, so any note could be read by its id."""
    place = f"authz-write-only-{SUFFIX}"  # no other test's
    writer = setup.jwt(sub=f"writer-{SUFFIX}", scope="kb:write", kb_collections=[place])
    reader = setup.jwt(sub=f"reader-{SUFFIX}", scope="kb:read kb:write", kb_collections=[place])
    text = f"{MARKER}: the spare keys of the boathouse hang behind the door"
    theirs = modern_call(setup.bridge.url, reader, "kb_addnote", {"text": text, "collection": place, "wait": True})
    note = int(theirs["result"]["structuredContent"]["document_id"])  # type: ignore[index]
    probe = {"text": text + "!", "collection": place, "wait": True}
    as_reader = modern_call(setup.bridge.url, reader, "kb_addnote", probe)["result"]["structuredContent"]  # type: ignore[index]
    assert [s["document_id"] for s in as_reader["similar"]] == [note]  # the hints work for a reader
    added = modern_call(setup.bridge.url, writer, "kb_addnote", {**probe, "text": text + "?"})["result"]["structuredContent"]  # type: ignore[index]
    assert added["document_id"] and added["similar"] == []
    # Nor is it told that a text it guesses is there (duplicate_of, and the note's id): its note is added.
    guessed = modern_call(setup.bridge.url, writer, "kb_addnote", {"text": text, "collection": place, "wait": True})
    guess = guessed["result"]["structuredContent"]  # type: ignore[index]
    assert guess["duplicate_of"] is None and guess["document_id"] not in (None, note), guess
    assert modern_call(setup.bridge.url, reader, "kb_addnote", {"text": text, "collection": place})[
        "result"]["structuredContent"]["duplicate_of"] in (note, guess["document_id"])  # type: ignore[index]
    moved = modern_call(setup.bridge.url, writer, "kb_update_note", {"document_id": note, "collection": place})
    answer = moved["result"]["structuredContent"]  # type: ignore[index]
    assert set(answer) <= {"id", "version", "updated_at", "collection"} and answer["id"] == note
    assert MARKER not in json.dumps(moved)
    retitled = modern_call(setup.bridge.url, writer, "kb_update_note", {"document_id": added["document_id"], "title": "mine"})
    assert retitled["result"]["structuredContent"]["title"] == "mine"  # type: ignore[index]
    assert "tags" not in retitled["result"]["structuredContent"]  # type: ignore[index]
