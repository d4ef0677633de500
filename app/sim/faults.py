"""Deterministic fault injection for the simulator.

A fault is drawn from a hash of (``seed``, request body bytes), so it does not depend on timing
or order. Transport-like faults (``fail`` = HTTP 500, ``hang`` = no answer until the client gives
up, ``malformed`` = a slot row without one label) strike only the FIRST delivery of a given body:
a retried, byte-identical body then succeeds. The number of injected faults is therefore
predictable: with rate 1.0, exactly one per distinct body. ``low_mass`` (the argmax is not a
label and the label mass is low) is a property of the read, not of the delivery: it strikes every
delivery of the body, like a real model that does not want to say a label.

Mid-run outages: ``down(seconds)`` makes every route but ``/sim/*`` answer 503 until it ends.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

__all__ = ["FaultPlan", "FaultRates"]

FAULT_KINDS = ("fail", "hang", "malformed", "low_mass")
_SEEN_LIMIT = 200_000


@dataclass(frozen=True)
class FaultRates:
    fail: float = 0.0
    hang: float = 0.0
    malformed: float = 0.0
    low_mass: float = 0.0


class FaultPlan:
    """Which fault (if any) a request body draws; counts what was injected."""

    def __init__(self, rates: FaultRates, *, seed: int = 0) -> None:
        values = [getattr(rates, kind) for kind in FAULT_KINDS]
        if sum(values) > 1.0 + 1e-9 or min(values) < 0:
            raise ValueError("fault rates must be >= 0 and add up to at most 1")
        self.rates = rates
        self.seed = seed
        self.injected: Counter[str] = Counter()
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._down_until = 0.0

    def draw(self, body: bytes) -> str | None:
        """The fault this delivery gets, or None. Counts it."""
        digest = hashlib.blake2b(body, digest_size=16, key=self.seed.to_bytes(8, "little")).digest()
        kind = self._kind(int.from_bytes(digest[:8], "little") / 2**64)
        if kind is None:
            return None
        if kind != "low_mass" and not self._first_delivery(digest):
            return None
        self.injected[kind] += 1
        return kind

    def _kind(self, u: float) -> str | None:
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += getattr(self.rates, kind)
            if u < edge:
                return kind
        return None

    def _first_delivery(self, digest: bytes) -> bool:
        if digest in self._seen:
            return False
        self._seen[digest] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    def down(self, seconds: float) -> None:
        """Answer 503 on every model route for ``seconds`` (0 brings it back up)."""
        self._down_until = time.monotonic() + max(0.0, seconds)

    @property
    def is_down(self) -> bool:
        return time.monotonic() < self._down_until
