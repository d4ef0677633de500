"""Hosted-API behaviour of the simulator's decision routes (``/v1/systemone``,
``/v1/decisions``), for testing clients that must stay inside a provider's limits. Off by
default: vLLM itself has none of it.

- ``decision_rps``: more than this many decision requests admitted in any 1 s window get 429
  with ``retry-after`` (when the window frees a slot), as a hosted API's rate limit does;
- ``decision_max_concurrent``: more decision requests than this at once get 429;
- a throttle storm (``POST /sim/throttle?seconds=N&retry_after=S``): every decision request
  gets 429 with ``retry-after: S`` for N seconds;
- ``refuse_marker``: a question whose instructions contain this text is answered with a
  refusal (``{"type": "refusal", "refusal": ...}``) while the others are answered.

Every 429 is counted (``throttled``), as is every refusal (``refused``), in ``/sim/stats``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DecisionLimits", "Throttled"]


class Throttled(Exception):
    """Answer 429 with ``retry-after``."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        super().__init__(why)
        self.why = why
        self.retry_after_s = retry_after_s


class DecisionLimits:
    """The rate limit, the concurrency limit and the throttle storm of the decision routes."""

    def __init__(self, *, rps: float = 0.0, max_concurrent: int = 0) -> None:
        self.rps = rps
        self.max_concurrent = max_concurrent
        self.in_flight = 0
        self.peak_in_flight = 0
        self._admitted: deque[float] = deque()
        self._storm_until = 0.0
        self._storm_retry_after = 1.0

    def storm(self, seconds: float, retry_after_s: float) -> None:
        """429 on every decision request for ``seconds`` (0 ends it)."""
        self._storm_until = time.monotonic() + max(0.0, seconds)
        self._storm_retry_after = retry_after_s

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Hold one decision request's place, or raise ``Throttled``."""
        now = time.monotonic()
        if now < self._storm_until:
            raise Throttled("dreads sim: throttle storm (POST /sim/throttle)",
                            self._storm_retry_after)
        if self.max_concurrent and self.in_flight >= self.max_concurrent:
            raise Throttled(f"dreads sim: more than {self.max_concurrent} concurrent decision "
                            "requests", 0.05)
        self._check_rate(now)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1

    def _check_rate(self, now: float) -> None:
        if self.rps <= 0:
            return
        window = self._admitted
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self.rps:
            raise Throttled(f"dreads sim: rate limit of {self.rps:g} decision requests per "
                            "second", max(0.001, 1.0 - (now - window[0])))
        window.append(now)
