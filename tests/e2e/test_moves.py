"""Moving documents between collections under concurrency, against the real local engine behind the bridge
under gunicorn (several workers): with the engine's atomic `PATCH /documents/{id}/tags`, and with an engine
that lacks it (a proxy answers 405), where the bridge moves in guarded steps. After any set of concurrent
moves a document is in exactly one collection, the target of a move reported done; other tags stay; a move
that fails midway leaves the old collection."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.faultproxy import Fault, FaultProxy
from kb_bridge.testing.mcp_http import error_code, modern_call
from kb_bridge.testing.processes import Service, start_bridge
from kb_bridge.testing.processes import ENGINE_KEY

TOKEN = "moves-token-0123456789abcdef"
TARGETS = [f"c{i}" for i in range(6)]


def engine_doc(engine_url: str, doc_id: int) -> dict[str, Any]:
    response = requests.get(f"{engine_url}/api/v1/documents/{doc_id}", headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


def new_note(bridge: Service, text: str) -> int:
    reply = modern_call(bridge.url, TOKEN, "kb_addnote", {"text": text, "tags": ["keep-me"], "collection": "start", "wait": True})
    return int(reply["result"]["structuredContent"]["document_id"])  # type: ignore[index]


def move(bridge: Service, doc_id: int, collection: str) -> str | None:
    """Move; None when the bridge reported it done, else the error code."""
    return error_code(modern_call(bridge.url, TOKEN, "kb_update_note", {"document_id": doc_id, "collection": collection}))


def concurrent_moves(bridge: Service, doc_id: int, count: int) -> dict[str, str | None]:
    targets = [TARGETS[i % len(TARGETS)] for i in range(count)]
    with ThreadPoolExecutor(count) as pool:
        outcomes = list(pool.map(lambda target: move(bridge, doc_id, target), targets))
    return {f"{i}:{target}": outcome for i, (target, outcome) in enumerate(zip(targets, outcomes, strict=True))}


def collection_tags(doc: dict[str, Any]) -> list[str]:
    return [tag for tag in doc["tags"] if tag.startswith("collection:")]


@pytest.fixture
def bridge(engine: Service, tmp_path: Path) -> Iterator[Service]:
    service = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN}, workers=3)
    yield service
    service.stop()


def test_concurrent_moves_leave_exactly_one_collection_one_version_step_each(engine: Service, bridge: Service) -> None:
    doc_id = new_note(bridge, "A note that many agents move at once.")
    before = engine_doc(engine.url, doc_id)["version"]
    outcomes = concurrent_moves(bridge, doc_id, 12)
    after = engine_doc(engine.url, doc_id)
    done = {name.split(":")[1] for name, outcome in outcomes.items() if outcome is None}
    assert set(outcomes.values()) <= {None, "CONFLICT"} and done
    assert len(collection_tags(after)) == 1 and collection_tags(after)[0].removeprefix("collection:") in done
    assert "keep-me" in after["tags"]
    # One version step per move that changed something (a move to where it already was changes nothing).
    assert after["version"] - before <= sum(1 for outcome in outcomes.values() if outcome is None)


def test_the_engines_tag_patch_is_atomic_and_conditional(engine: Service, bridge: Service) -> None:
    doc_id = new_note(bridge, "A note whose tags change in one step.")
    doc = engine_doc(engine.url, doc_id)
    url, auth = f"{engine.url}/api/v1/documents/{doc_id}/tags", {"Authorization": f"Bearer {ENGINE_KEY}"}
    stale = requests.patch(url, json={"add": ["collection:x"], "remove": ["collection:start"]},
                           headers={**auth, "If-Match": f'"{doc["version"] - 1}"'}, timeout=30)
    assert stale.status_code == 412 and engine_doc(engine.url, doc_id)["tags"] == doc["tags"]
    moved = requests.patch(url, json={"add": ["collection:x"], "remove": ["collection:start"]},
                           headers={**auth, "If-Match": f'"{doc["version"]}"'}, timeout=30).json()
    assert moved == {"id": doc_id, "tags": ["collection:x", "keep-me"], "version": doc["version"] + 1}
    unconditional = requests.patch(url, json={"add": ["other"]}, headers=auth, timeout=30).json()
    assert unconditional["version"] == doc["version"] + 2 and "other" in unconditional["tags"]
    assert requests.patch(f"{engine.url}/api/v1/documents/987654321/tags", json={"add": ["a"]}, headers=auth, timeout=30).status_code == 404


@pytest.fixture
def proxied(engine: Service, tmp_path: Path) -> Iterator[tuple[Service, FaultProxy]]:
    """A bridge whose engine has no PATCH /documents/{id}/tags (the proxy answers 405 to it)."""
    with FaultProxy(engine.url) as proxy:
        proxy.rules.append(lambda method, path, _: Fault(status=405) if method == "PATCH" and path.endswith("/tags") else None)
        service = start_bridge(tmp_path, {"KB_ENGINE_URL": proxy.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN}, workers=3)
        try:
            yield service, proxy
        finally:
            service.stop()


def test_without_the_patch_concurrent_moves_still_leave_exactly_one_collection(engine: Service, proxied: tuple[Service, FaultProxy]) -> None:
    bridge, proxy = proxied
    doc_id = new_note(bridge, "A note moved by agents through an older engine.")
    outcomes = concurrent_moves(bridge, doc_id, 12)
    after = engine_doc(engine.url, doc_id)
    done = {name.split(":")[1] for name, outcome in outcomes.items() if outcome is None}
    assert set(outcomes.values()) <= {None, "CONFLICT"} and done
    assert len(collection_tags(after)) == 1 and collection_tags(after)[0].removeprefix("collection:") in done
    assert "keep-me" in after["tags"]
    assert any(method == "POST" and path.endswith("/tags") for method, path, _ in proxy.seen)  # it did move in steps


def test_without_the_patch_a_move_failing_midway_keeps_the_old_collection(engine: Service, proxied: tuple[Service, FaultProxy]) -> None:
    bridge, proxy = proxied
    doc_id = new_note(bridge, "A note whose move breaks halfway.")
    # Removing the old collection tag fails (after the new one was added); putting things back works.
    proxy.rules.append(lambda method, path, _: Fault(status=500) if method == "DELETE" and path.endswith("/tags/collection%3Astart") else None)
    assert move(bridge, doc_id, "elsewhere") in ("ENGINE_ERROR", "ENGINE_UNAVAILABLE")
    after = engine_doc(engine.url, doc_id)
    assert collection_tags(after) == ["collection:start"] and "keep-me" in after["tags"]


# --- without the PATCH: the kb v3 spec's order, remove the old collection first (issue 32, item 18) ------------


def tag_calls(proxy: FaultProxy, doc_id: int) -> list[str]:
    """The tag changes the engine received for one document, in order: "POST" (add) or "DELETE <tag>"."""
    prefix = f"/api/v1/documents/{doc_id}/tags"
    calls = []
    for method, path, _ in list(proxy.seen):
        if method == "POST" and path == prefix:
            calls.append("POST")
        elif method == "DELETE" and path.startswith(prefix + "/"):
            calls.append("DELETE " + requests.utils.unquote(path.removeprefix(prefix + "/")))
    return calls


def test_without_the_patch_a_move_first_removes_the_old_collection_then_adds_the_new(
        engine: Service, proxied: tuple[Service, FaultProxy]) -> None:
    bridge, proxy = proxied
    doc_id = new_note(bridge, "A note moved the way the kb v3 spec says.")
    assert move(bridge, doc_id, "memory") is None
    assert tag_calls(proxy, doc_id) == ["DELETE collection:start", "POST"]
    after = engine_doc(engine.url, doc_id)
    assert collection_tags(after) == ["collection:memory"] and "keep-me" in after["tags"]


def test_without_the_patch_a_move_whose_add_fails_puts_the_old_collection_back(
        engine: Service, proxied: tuple[Service, FaultProxy]) -> None:
    bridge, proxy = proxied
    doc_id = new_note(bridge, "A note whose move cannot add its new collection.")
    tags_path, doc_path = f"/api/v1/documents/{doc_id}/tags", f"/api/v1/documents/{doc_id}"
    undoing = {"read": False, "failed": False}

    def add_fails_until_the_undo(method: str, path: str, _count: int) -> Fault | None:
        # Every attempt at adding the new collection fails (retries included); once the bridge reads the
        # document again after a failure (its undo), adding the old collection back is let through.
        if method == "GET" and path == doc_path and undoing["failed"]:
            undoing["read"] = True
        if method == "POST" and path == tags_path and not undoing["read"]:
            undoing["failed"] = True
            return Fault(status=500)
        return None

    proxy.rules.append(add_fails_until_the_undo)
    assert move(bridge, doc_id, "elsewhere") in ("ENGINE_ERROR", "ENGINE_UNAVAILABLE")
    calls = tag_calls(proxy, doc_id)
    assert calls[0] == "DELETE collection:start" and calls[-1] == "POST", calls  # removed first, put back last
    after = engine_doc(engine.url, doc_id)
    assert collection_tags(after) == ["collection:start"] and "keep-me" in after["tags"]
