"""An agent's single upload does not wait behind another client's flood (issue 37 item 7), on a real engine
process with the model: one client posts a flood of small files without `priority`, another program posts
one file; the single file is stored before every flood file that was still queued when it was posted, and
the whole flood is stored after all (ingest/scheduling.py, Submitters). Counted by the order documents are
stored in (their ids), never timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from kb_bridge.testing.engine_app import wait_for
from kb_bridge.testing.processes import Service, start_engine

KEY = "fair-queue-test-key-0123456789abcdef"
FLOOD = 240
FLOOD_CLIENTS = 4
# Each flood file is three chunks of about 1,000 characters, and the engine embeds one chunk per model call:
# the flood stays queued for a while after it is posted.
PARAGRAPH = "The survey of marsh {number} counted herons, egrets and bitterns along the reed beds. " * 12


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("fair-queue-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": KEY, "KB_ENGINE_EMBED_BATCH": "1"})
    yield service
    service.stop()


def _session(user_agent: str) -> requests.Session:
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {KEY}", "User-Agent": user_agent})
    return session


def _post(session: requests.Session, url: str, name: str, text: str) -> dict[str, Any]:
    response = session.post(f"{url}/api/v1/jobs", files={"file": (name, text.encode(), "text/plain")}, timeout=60)
    assert response.status_code == 202, response.text
    return dict(response.json())


def _flood(url: str, numbers: range, jobs: list[int]) -> None:
    session = _session("survey-loader/1.0")  # one program on one host: one submitter, several connections
    for number in numbers:
        text = "\n\n".join(PARAGRAPH.format(number=number) for _ in range(3))
        jobs.append(int(_post(session, url, f"survey{number}.txt", text)["id"]))


def _job(session: requests.Session, url: str, job_id: int) -> dict[str, Any]:
    return dict(session.get(f"{url}/api/v1/jobs/{job_id}", timeout=30).json())


def test_an_agents_single_upload_is_stored_before_the_flood_queued_ahead_of_it(engine: Service) -> None:
    flood: list[int] = []
    loaders = [threading.Thread(target=_flood, args=(engine.url, range(i, FLOOD, FLOOD_CLIENTS), flood))
               for i in range(FLOOD_CLIENTS)]
    for loader in loaders:
        loader.start()
    for loader in loaders:
        loader.join()
    assert len(flood) == FLOOD

    agent = _session("kb-bridge/0.1.0")  # what the bridge sends for an agent's kb_upload_finish
    # The flood's first file is prompt work, as a single upload is (ingest/scheduling.py: "the first file of a
    # flood goes in the prompt lane too"), and older than the agent's, so it goes first by right. Claims take the
    # prompt lane first: once the engine has claimed any of the flood, that file is no longer queued. (An engine
    # slow to start, the model still loading, had it still queued when the agent posted.)
    wait_for(lambda: (queue := agent.get(f"{engine.url}/api/v1/status", timeout=30).json()["queue"])["running"]
             + queue["done"] >= 1, "the engine's first claim", deadline=300)
    single = _post(agent, engine.url, "minutes.txt", "Minutes: the kingfisher nest moved to the east bank.")
    # Flood jobs still queued now were queued when the single upload was posted (statuses only move on).
    queued = [job_id for job_id in flood if _job(agent, engine.url, job_id)["status"] == "queued"]
    assert len(queued) >= FLOOD // 4, f"the flood drained before the single upload ({len(queued)} queued)"

    done = wait_for(lambda: (job := _job(agent, engine.url, single["id"]))["status"] in ("done", "failed") and job,
                    "the single upload", deadline=300)
    assert done["status"] == "done", done
    stored = {job_id: wait_for(lambda job_id=job_id: (job := _job(agent, engine.url, job_id))["status"] in
                               ("done", "failed") and job, f"flood job {job_id}", deadline=600)
              for job_id in flood}
    assert all(job["status"] == "done" for job in stored.values()), stored  # the flood is not starved
    after = [job_id for job_id in queued if stored[job_id]["document_id"] > done["document_id"]]
    assert after == queued, sorted(set(queued) - set(after))
