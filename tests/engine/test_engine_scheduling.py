"""The ingestion queue's policy (ingest/scheduling.py) through the worker's own line of prepared jobs: what
a note waits behind, and that no lane starves while another has work. No model and no store: the jobs are
prepared by hand and the windows are embedded by counting."""

from __future__ import annotations

import pytest

from kb_bridge.local_engine.ingest import scheduling
from kb_bridge.local_engine.ingest.worker import _Ahead, _Work
from kb_bridge.local_engine.store.base import ClaimedJob

BATCH = 16
WINDOW = BATCH * 32


def _work(job_id: int, lane: int, chunks: int = 1, chars: int = 700) -> _Work:
    job = ClaimedJob(id=job_id, type="note" if lane == scheduling.PROMPT else "file", filename=None, payload={},
                     staged_path=None, priority=lane)
    work = _Work(job, texts=["x" * chars] * chunks, missing=list(range(chunks)))
    work.left = chunks
    return work


def _calls(ahead: _Ahead) -> list[list[int]]:
    """Drain `ahead` window by window as the embed thread does: the job ids of each model call, in order."""
    calls: list[list[int]] = []
    while taken := ahead.take(WINDOW, 0):
        taken.sort(key=lambda pair: scheduling.call_order(pair[0].lane, len(pair[0].texts[pair[1]])))
        calls += [[work.job.id for work, _ in taken[i : i + BATCH]] for i in range(0, len(taken), BATCH)]
    return calls


def _first_call(calls: list[list[int]], job_id: int) -> int:
    return next(number for number, call in enumerate(calls) if job_id in call)


def test_a_note_goes_in_the_first_call_ahead_of_1500_queued_small_files() -> None:
    ahead = _Ahead()
    for job_id in range(1500):
        ahead.put(_work(job_id, scheduling.FILES, chars=300))  # shorter than the note: length alone would not do
    ahead.put(_work(9999, scheduling.PROMPT, chars=900))
    assert _first_call(_calls(ahead), 9999) == 0


def test_a_bulk_load_keeps_its_share_through_a_flood_of_undeclared_files() -> None:
    ahead = _Ahead()
    for job_id in range(3000):
        ahead.put(_work(job_id, scheduling.FILES))
    for job_id in range(5000, 5100):
        ahead.put(_work(job_id, scheduling.BULK, chunks=4))
    calls = _calls(ahead)
    # Files : bulk = 2 : 1 while both have work: the 400 bulk chunks go in the first 3 windows (170 a
    # window), where strict priority would leave them behind the 3,000 files, in windows 6 and 7.
    last_bulk = max(number for number, call in enumerate(calls) if any(job_id >= 5000 for job_id in call))
    assert last_bulk < 3 * WINDOW // BATCH, (last_bulk, len(calls))
    assert sorted(job_id for call in calls for job_id in call) == sorted(
        [*range(3000), *[job_id for job_id in range(5000, 5100) for _ in range(4)]])  # every chunk, once


def test_a_flood_of_notes_does_not_stop_the_files() -> None:
    ahead = _Ahead()
    for job_id in range(2000):
        ahead.put(_work(job_id, scheduling.PROMPT))
    for job_id in range(5000, 5100):
        ahead.put(_work(job_id, scheduling.FILES))
    calls = _calls(ahead)
    last_file = max(_first_call(calls, job_id) for job_id in range(5000, 5100))
    assert last_file < len(calls) // 2, (last_file, len(calls))


def test_window_shares_fill_the_window_and_follow_the_weights() -> None:
    shares = scheduling.window_shares({scheduling.PROMPT: 0, scheduling.FILES: 10_000, scheduling.BULK: 10_000}, 512)
    assert sum(shares.values()) == 512
    assert shares[scheduling.FILES] == pytest.approx(2 * shares[scheduling.BULK], abs=2)
    # A lane that needs less leaves the rest to the others.
    shares = scheduling.window_shares({scheduling.PROMPT: 2, scheduling.FILES: 10_000, scheduling.BULK: 30}, 512)
    assert shares == {scheduling.PROMPT: 2, scheduling.FILES: 480, scheduling.BULK: 30}
    assert scheduling.window_shares({scheduling.FILES: 3}, 512) == {scheduling.FILES: 3}
    assert sum(scheduling.window_shares({scheduling.FILES: 0, scheduling.BULK: 0}, 512).values()) == 0


def test_lanes_by_what_the_work_is_unless_asked() -> None:
    small, large = 2_000, scheduling.INTERACTIVE_BYTES + 1
    assert scheduling.lane_of("note", None, small) == scheduling.PROMPT
    assert scheduling.lane_of("file", None, small) == scheduling.FILES
    assert scheduling.lane_of("file", None, large) == scheduling.BULK
    assert scheduling.lane_of("note", None, large) == scheduling.BULK
    assert scheduling.lane_of("file", "interactive", large) == scheduling.PROMPT
    assert scheduling.lane_of("note", "bulk", small) == scheduling.BULK


def test_the_prepare_thread_claims_prompt_work_always_and_other_lanes_up_to_their_limit() -> None:
    assert scheduling.lanes_to_claim({}, 100) == scheduling.LANES
    full_files = {scheduling.FILES: 100, scheduling.BULK: 10}
    assert scheduling.lanes_to_claim(full_files, 100) == (scheduling.PROMPT, scheduling.BULK)
    assert scheduling.lanes_to_claim({lane: 10**6 for lane in scheduling.LANES}, 100) == (scheduling.PROMPT,)


def test_a_single_undeclared_upload_is_prompt_work_and_a_flood_after_its_first_file_is_not() -> None:
    now = [0.0]
    submitters = scheduling.Submitters(clock=lambda: now[0])
    small = 2_000

    def lane(submitter: str) -> int:
        return scheduling.lane_of("file", None, small, submitters.single(submitter))

    flood = [lane("127.0.0.1 python-requests/2.32")]
    for _ in range(1_500):
        now[0] += 0.05
        flood.append(lane("127.0.0.1 python-requests/2.32"))
    assert flood[0] == scheduling.PROMPT  # the first file of a flood: one file
    assert set(flood[1:]) == {scheduling.FILES}
    # Another program's single upload during the flood goes ahead of it; so does its next one, a while later.
    assert lane("127.0.0.1 kb-bridge/0.1.0") == scheduling.PROMPT
    now[0] += scheduling.QUIET_SECONDS / 4
    assert lane("127.0.0.1 kb-bridge/0.1.0") == scheduling.FILES  # two in a row: a flood of its own
    now[0] += scheduling.QUIET_SECONDS * 2
    assert lane("127.0.0.1 kb-bridge/0.1.0") == scheduling.PROMPT
    # The flood's client, quiet for a while, has a single upload again.
    assert lane("127.0.0.1 python-requests/2.32") == scheduling.PROMPT
    # Declared and large work keep their lanes whatever the submitter did.
    assert scheduling.lane_of("file", "bulk", small, single=True) == scheduling.BULK
    assert scheduling.lane_of("file", None, scheduling.INTERACTIVE_BYTES + 1, single=True) == scheduling.BULK


def test_submitters_remembered_are_bounded() -> None:
    now = [0.0]
    submitters = scheduling.Submitters(clock=lambda: now[0])
    for number in range(scheduling.MAX_SUBMITTERS + 10):
        assert submitters.single(f"client {number}")
    assert not submitters.single(f"client {scheduling.MAX_SUBMITTERS + 9}")  # seen just now
    assert submitters.single("client 0")  # forgotten, the oldest: a new submitter
