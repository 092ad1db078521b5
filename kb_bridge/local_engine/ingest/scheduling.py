"""Who goes next: the lanes of the ingestion queue and the shares of the model each gets.

A client need not declare anything for the queue to be fair. What a job is tells the engine who waits for it:

- **prompt** (2): a note, or anything sent with `priority: "interactive"`: someone (an agent, a person)
  waits to search for it. Its chunks go first in every window of model calls, and the embed thread takes
  newly arrived prompt work between two calls of any window (at most `PROMPT_CALLS_BETWEEN` calls' worth
  per gap), so that it waits for about one model call, not for the queue.
- **files** (1): an upload of up to `INTERACTIVE_BYTES` sent without `priority` by a submitter that sent
  another such upload less than `QUIET_SECONDS` before: one file of a flood that a client posts without
  saying so (kb_upload_finish in a loop, scripts, other CLIs).
  A submitter's single upload (none from it in the last `QUIET_SECONDS`) is prompt work, like a note: an
  agent that uploads one file waits for it, and it must not queue behind another client's flood. The engine
  has one API key, so a submitter is what the request shows of its sender: the peer address and the
  User-Agent (`Submitters`). The first file of a flood goes in the prompt lane too, one file per submitter
  and quiet spell, which costs the flood nothing.
- **bulk** (0): `priority: "bulk"` (what `kb-bridge ingest` and `import` send), and larger undeclared work.

While several lanes have work, each window of model calls is shared among them by `SHARES` (by chunks), so
no lane starves: a flood of undeclared files cannot stop a declared bulk load, and the bulk load does not
hold up the files. Within a lane, jobs go in the order they were queued. The lane is stored as the job's
`priority` column (0, 1, 2; the API shows 1 and 2 as "interactive"), so that claims from the database
(both stores order by it) take prompt work first too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

BULK = 0
FILES = 1
PROMPT = 2
LANES = (PROMPT, FILES, BULK)  # the order in which a window lists them
LANE_NAMES = {PROMPT: "prompt", FILES: "files", BULK: "bulk"}

# Work up to this size is not bulk unless the client says so: an agent's note, one small file.
INTERACTIVE_BYTES = 256 * 1024
# Each lane's share of the model while several have work. Prompt work is small (a note is a chunk or two), so
# its share rarely binds; files over bulk 2 : 1 keeps a declared bulk load moving through any flood.
SHARES: Mapping[int, int] = {PROMPT: 4, FILES: 2, BULK: 1}
# How much newly arrived prompt work the embed thread takes between two calls of a window: enough for the
# notes of a few agents at once, little enough that a flood of notes leaves the window's other lanes 1 call
# in PROMPT_CALLS_BETWEEN + 1.
PROMPT_CALLS_BETWEEN = 2
# A submitter's upload is single when its previous undeclared upload came longer ago than this. A client
# posting a flood sends its next file as soon as the last one is accepted (well under a second apart, also on
# a loaded machine); an agent's uploads come one tool call apart.
QUIET_SECONDS = 2.0
# Submitters remembered at most (older ones are forgotten first); one more is simply a new submitter.
MAX_SUBMITTERS = 4096


def lane_of(job_type: str, asked: str | None, size: int, single: bool = False) -> int:
    """The lane of new work: as asked ("interactive": prompt, "bulk"), else by what it is and its size; a
    `single` small upload (its submitter sent no other lately: Submitters.single) is prompt work."""
    if asked == "bulk":
        return BULK
    if asked == "interactive":
        return PROMPT
    if size > INTERACTIVE_BYTES:
        return BULK
    return PROMPT if job_type == "note" or single else FILES


class Submitters:
    """When each submitter last sent an undeclared upload, to tell a single upload from one file of a flood.

    In memory, per engine process: replicas sharing a PostgreSQL queue each judge the uploads they accept.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}  # insertion order: the least recently seen first
        self._lock = threading.Lock()

    def single(self, submitter: str) -> bool:
        """Count an undeclared upload from `submitter`; True if it sent none in the last QUIET_SECONDS."""
        now = self._clock()
        with self._lock:
            last = self._last.pop(submitter, None)
            self._last[submitter] = now
            if len(self._last) > MAX_SUBMITTERS:
                del self._last[next(iter(self._last))]
        return last is None or now - last > QUIET_SECONDS


def lane_of_priority(priority: int) -> int:
    """The lane of a stored job (rows queued by an engine before lanes hold 0 or 1)."""
    return max(BULK, min(PROMPT, priority))


def window_shares(waiting: Mapping[int, int], limit: int) -> dict[int, int]:
    """How many of `limit` chunks each lane puts in the next window, given the chunks `waiting` in each.

    Lanes with work share the window by SHARES; a lane that needs less than its share leaves the rest to the
    others (water-filling), so the window is full whenever enough work waits.
    """
    taken = dict.fromkeys(waiting, 0)
    active = {lane for lane, chunks in waiting.items() if chunks > 0}
    room = limit
    while active and room > 0:
        weight = sum(SHARES[lane] for lane in active)
        given = 0
        for lane in sorted(active, key=LANES.index):
            share = max(1, room * SHARES[lane] // weight)
            amount = min(share, waiting[lane] - taken[lane], room - given)
            taken[lane] += amount
            given += amount
        room -= given
        active = {lane for lane in active if taken[lane] < waiting[lane]}
        if given == 0:
            break
    return taken


def call_order(lane: int, input_chars: int) -> tuple[bool, int]:
    """Where a chunk goes in its window: prompt work in the first model calls, then shortest first (each call
    pads to its longest input, so neighbours in length waste little)."""
    return lane != PROMPT, input_chars


def lanes_to_claim(ahead: Mapping[int, int], limit: int) -> tuple[int, ...]:
    """The lanes whose jobs the prepare thread may claim, given the chunks prepared `ahead` in each: prompt
    work always, the other lanes while they hold fewer than `limit` chunks (the model's next windows)."""
    return tuple(lane for lane in LANES if lane == PROMPT or ahead.get(lane, 0) < limit)
