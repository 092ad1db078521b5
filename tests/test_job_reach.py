"""reach.job_visible / visible_job: the one rule for who sees a job, against an engine that reports job tags
(3.7) and one that does not (fail closed). The end-to-end tests (tests/e2e/test_authorization.py) run it
against the real local engine; here the engine is faked to be an older one."""

from __future__ import annotations

import pytest
import responses

from kb_bridge.auth.principal import Principal
from kb_bridge.errors import NotFound
from kb_bridge.runtime import Bridge
from kb_bridge.tools import reach
from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import document, job

MEM_ONLY = Principal("mem-agent", collections=frozenset({"mem"}), kind="token")
EVERYTHING = Principal("admin")


def test_a_job_without_a_document_is_where_its_tags_file_it(bridge: Bridge, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/jobs/8", json=job(8, status="failed", tags=["collection:mem", "x"]))
    engine.get(f"{API}/jobs/9", json=job(9, status="failed", filename="secret.pdf", tags=["collection:other"]))
    found = reach.visible_job(bridge.engine, MEM_ONLY, 8)
    assert found["collection"] == "mem" and found["tags"] == ["x"]
    with pytest.raises(NotFound, match="^job 9 not found$"):
        reach.visible_job(bridge.engine, MEM_ONLY, 9)
    assert reach.visible_job(bridge.engine, EVERYTHING, 9)["filename"] == "secret.pdf"


def test_against_an_engine_without_job_tags_a_limited_token_sees_no_job_without_a_document(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/jobs/7", json=job(7, status="queued"))  # an engine before 3.7: no `tags`
    with pytest.raises(NotFound, match="^job 7 not found$"):
        reach.visible_job(bridge.engine, MEM_ONLY, 7)
    assert reach.visible_job(bridge.engine, EVERYTHING, 7)["collection"] is None


def test_a_job_with_a_document_is_where_the_document_is_now(bridge: Bridge, engine: responses.RequestsMock) -> None:
    # Filed into mem, then moved away: the job goes with its document.
    engine.get(f"{API}/jobs/5", json=job(5, status="done", document_id=42, tags=["collection:mem"]))
    engine.get(f"{API}/documents/42", json=document(42, tags=["collection:other"]))
    with pytest.raises(NotFound, match="^job 5 not found$"):
        reach.visible_job(bridge.engine, MEM_ONLY, 5)
