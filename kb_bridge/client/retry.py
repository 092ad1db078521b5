"""The retry policy for engine calls: the only place that decides whether and when to retry.

Rules (after urllib3 and requests: never retry a request whose data may have reached the
server unless repeating it is harmless):
- a failure marked `Retryable` (connection refused, timeout, 5xx, 429) is retried when the
  call is *safe*: a read, a PATCH with If-Match, a POST carrying an Idempotency-Key;
- an unsafe call is retried only when the request provably never left (`NeverSent`);
- attempts are bounded, waits are jittered exponential ("full jitter"), and a Retry-After
  from the engine is honoured up to a cap;
- nothing outlives the call's deadline (client/deadline.py): no retry starts once it has passed, and no
  wait runs past it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_any
from tenacity.stop import stop_base

from kb_bridge.client import deadline
from kb_bridge.errors import NeverSent, Retryable
from kb_bridge.settings import EngineSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

class _PastDeadline(stop_base):
    """Stop retrying once the call's deadline has passed."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        left = deadline.remaining()
        return left is not None and left <= 0


def should_retry(exc: BaseException, safe: bool) -> bool:
    return isinstance(exc, Retryable) and (safe or isinstance(exc, NeverSent))


class RetryPolicy:
    """Runs a callable under the engine retry rules; thread-safe (tenacity keeps per-thread state)."""

    def __init__(
        self,
        settings: EngineSettings,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backoff = settings.retry_backoff
        self._max_wait = settings.retry_max_wait
        self._safe = self._retrying(settings, sleep, safe=True)
        self._unsafe = self._retrying(settings, sleep, safe=False)

    def _retrying(self, settings: EngineSettings, sleep: Callable[[float], None], safe: bool) -> Retrying:
        return Retrying(
            stop=stop_any(stop_after_attempt(settings.retry_attempts), _PastDeadline()),
            wait=self._wait,
            sleep=sleep,
            reraise=True,
            retry=retry_if_exception(lambda e: should_retry(e, safe)),
            before_sleep=self._log,
        )

    def run(self, fn: Callable[[], T], *, safe: bool) -> T:
        retrying = self._safe if safe else self._unsafe
        return retrying(fn)

    def wait_seconds(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (exposed for tests)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self._max_wait))
        ceiling = min(self._max_wait, self._backoff * (2 ** (attempt - 1)))
        return random.uniform(0, ceiling)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        wait = self.wait_seconds(state.attempt_number, getattr(exc, "retry_after", None))
        left = deadline.remaining()
        return wait if left is None else max(0.0, min(wait, left))

    def _log(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return
        logger.info(
            "engine call failed (%s), retrying: attempt %d, waiting %.2fs",
            getattr(exc, "code", type(exc).__name__),
            state.attempt_number,
            state.upcoming_sleep,
        )
