"""Where kb_addnote's near-duplicate hint should start (kb_bridge/tools/similar.py, SIMILAR_SCORE).

One local engine in this process (SQLite, the bundled model), the first note of every pair stored; then the
second note of each pair is the query of a vector search over the collection, exactly as kb_addnote asks
for its hints. A pair's score is the search score of its first note. Three kinds of pairs: paraphrases (the
same fact in other words: a hint is wanted), same-topic pairs (another fact about the same thing: a hint
is acceptable, not needed), and unrelated notes (the score of every other stored note: no hint wanted).

    python bench/near_duplicates.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

# (stored note, paraphrase, same-topic note with another fact)
PAIRS: list[tuple[str, str, str]] = [
    ("The user prefers concise answers with bullet points.",
     "Keep replies short and use bullet lists; that is what the user likes.",
     "The user wants code samples in Python rather than JavaScript."),
    ("The staging database password rotates every 30 days.",
     "Every thirty days the staging DB password is changed.",
     "The staging database runs PostgreSQL 16 on a single node."),
    ("Deployments to production happen on Tuesdays and Thursdays only.",
     "We only ship to prod on Tuesday and Thursday.",
     "Production deployments need approval from two reviewers."),
    ("Alice is the on-call engineer this week.",
     "This week the person on call is Alice.",
     "Bob covers the on-call rotation next week."),
    ("The office Wi-Fi password is written on the whiteboard in room 4.",
     "You can find the Wi-Fi password for the office on room 4's whiteboard.",
     "The guest Wi-Fi network is called Visitors and has no password."),
    ("Expense reports must be filed within 30 days of the purchase.",
     "File your expenses no later than a month after you bought something.",
     "Meals while travelling are reimbursed up to 50 euros a day."),
    ("The project uses ruff for linting and mypy for type checks.",
     "Linting is done with ruff, and type checking with mypy, in this project.",
     "The project's tests run with pytest on Python 3.12."),
    ("The user's timezone is Central European Time.",
     "The user lives in the CET time zone.",
     "The user starts work at 8 in the morning."),
    ("Backups of the main database run nightly at 02:00 UTC.",
     "Every night at 2 AM UTC the main database is backed up.",
     "Backups are kept for 35 days and then deleted."),
    ("The customer prefers to be contacted by email, not phone.",
     "Email the customer; they don't like phone calls.",
     "The customer's contract renews in March."),
    ("Our API rate limit is 100 requests per minute per key.",
     "Each API key may make at most one hundred calls a minute.",
     "API keys expire after one year and must be renewed."),
    ("The quarterly planning meeting is on the first Monday of the quarter.",
     "We plan the quarter in a meeting on its first Monday.",
     "The quarterly planning meeting takes place in the big conference room."),
    ("The user is allergic to peanuts.",
     "Peanuts cause the user an allergic reaction.",
     "The user is vegetarian."),
    ("Release notes are written in the CHANGELOG.md file at the repository root.",
     "We keep the release notes in CHANGELOG.md, at the top of the repo.",
     "Releases are tagged with semantic version numbers."),
    ("The VPN must be used when accessing internal dashboards from home.",
     "From home, internal dashboards are reachable only through the VPN.",
     "The VPN client is WireGuard."),
    ("The user's favourite programming language is Rust.",
     "Rust is the language the user likes best.",
     "The user has ten years of experience with C++."),
    ("Invoices are sent on the last working day of each month.",
     "At the end of every month, on its last business day, invoices go out.",
     "Invoices are payable within 14 days."),
    ("The build server has 64 GB of memory and 16 cores.",
     "Our CI machine comes with sixteen cores and 64 gigabytes of RAM.",
     "The build server runs Ubuntu 24.04."),
    ("Support tickets marked urgent must be answered within one hour.",
     "Urgent tickets need a reply in under an hour.",
     "Support tickets are tracked in Zendesk."),
    ("The user wants answers in German.",
     "Reply to the user in German, please.",
     "The user is learning Spanish."),
    ("The team's stand-up meeting is at 9:30 every weekday.",
     "Each working day the team meets for stand-up at half past nine.",
     "Stand-up meetings last no longer than fifteen minutes."),
    ("Passwords must have at least 14 characters.",
     "A password needs a minimum length of fourteen characters.",
     "Passwords may not be reused within a year."),
    ("The marketing site is hosted on Netlify.",
     "Netlify hosts our marketing website.",
     "The marketing site is built with Hugo."),
    ("The user dislikes emojis in written replies.",
     "Don't put emojis in responses; the user doesn't like them.",
     "The user prefers British spelling."),
    ("The warehouse closes at 6 pm on Fridays.",
     "On Fridays the warehouse shuts at 18:00.",
     "The warehouse is located next to the train station."),
]


def measure() -> dict[str, Any]:
    from kb_bridge.local_engine.app import create_app
    from kb_bridge.local_engine.config import EngineConfig
    from kb_bridge.local_engine.embedding.runtime import load_onnxruntime_first

    load_onnxruntime_first("auto", "auto")
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(EngineConfig(data_dir=Path(tmp), wait_for_model=True))
        client = app.test_client()
        ids = []
        for stored, _paraphrase, _topic in PAIRS:
            job = client.post("/api/v1/jobs", json={"text": stored, "tags": ["collection:memory"]}).json
            ids.append(job["id"])
        documents = [_wait(client, job_id) for job_id in ids]
        paraphrase, same_topic, unrelated = [], [], []
        for index, (_stored, para, topic) in enumerate(PAIRS):
            for query, kind in ((para, paraphrase), (topic, same_topic)):
                scores = _scores(client, query)
                kind.append(scores.get(documents[index], 0.0))
                if kind is paraphrase:
                    unrelated += [score for doc, score in scores.items() if doc != documents[index]]
        app.extensions["kb_engine"].close()
    return {"paraphrase": _summary(paraphrase), "same_topic": _summary(same_topic), "unrelated": _summary(unrelated),
            "cuts": {f"{cut:.2f}": {"paraphrases_hinted": _share(paraphrase, cut), "same_topic_hinted":
                                   _share(same_topic, cut), "unrelated_hinted": _share(unrelated, cut)}
                     for cut in (0.60, 0.65, 0.70, 0.75, 0.80, 0.85)}}


def _wait(client: Any, job_id: int) -> int:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/jobs/{job_id}").json
        if job["status"] == "done":
            return int(job["document_id"])
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id}")


def _scores(client: Any, query: str) -> dict[int, float]:
    body = {"query": query, "top_n": 100, "mode": "vector", "tags": ["collection:memory"], "doc_type": "note"}
    answer = client.post("/api/v1/search", json=body).json
    assert answer["mode"] == "vector", answer
    return {hit["document_id"]: hit["score"] for hit in answer["results"]}


def _summary(scores: list[float]) -> dict[str, float]:
    ordered = sorted(scores)
    return {"n": len(ordered), "min": round(ordered[0], 3), "median": round(statistics.median(ordered), 3),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 3), "max": round(ordered[-1], 3)}


def _share(scores: list[float], cut: float) -> float:
    return round(sum(score >= cut for score in scores) / len(scores), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    figures = measure()
    print(json.dumps(figures, indent=None if parser.parse_args().json else 2))


if __name__ == "__main__":
    main()
