"""What a run spends: tokens of a request, dollars at a price, the projected total. Pure.

Token prices are dollars per million tokens, input (prompt) and output apart; a GPU pod's
price is dollars per hour of its time. A price not given prices nothing: the cost of tokens or
time without a price is None, never 0, so nothing shows a dollar figure nobody gave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HOUR_S", "MILLION_TOKENS", "SpendDelta", "TokenPrices", "describe_spend", "gpu_cost",
           "projected_total", "usage_tokens"]

MILLION_TOKENS = 1_000_000  #: a token price is dollars per this many tokens
HOUR_S = 3600.0  #: a GPU price is dollars per this many seconds


@dataclass(frozen=True)
class TokenPrices:
    """A run's token prices (None: not given)."""

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None or self.output_per_mtok is not None

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        """Dollars for these tokens; None when neither price is given."""
        if not self.priced:
            return None
        return (input_tokens * (self.input_per_mtok or 0.0)
                + output_tokens * (self.output_per_mtok or 0.0)) / MILLION_TOKENS


def gpu_cost(gpu_seconds: float, price_hour: float | None) -> float | None:
    """Dollars for ``gpu_seconds`` of a pod at ``price_hour``; None without a price."""
    return None if price_hour is None else gpu_seconds * price_hour / HOUR_S


def usage_tokens(usage: Mapping[str, Any] | None) -> tuple[int, int]:
    """(input, output) tokens of an endpoint's ``usage`` object, in either naming
    (``input_tokens``/``output_tokens``, or ``prompt_tokens``/``completion_tokens``); a
    missing or malformed count is 0."""
    if not usage:
        return 0, 0
    return (_count(usage, "input_tokens", "prompt_tokens"),
            _count(usage, "output_tokens", "completion_tokens"))


def _count(usage: Mapping[str, Any], *names: str) -> int:
    for key in names:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


@dataclass(frozen=True)
class SpendDelta:
    """What one commit adds to a run's spend in one cell."""

    decisions: int = 0
    reads: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    gpu_seconds: float = 0.0
    cost: float | None = None  #: dollars; None: nothing of it was priced

    def plus(self, other: SpendDelta) -> SpendDelta:
        cost = (None if self.cost is None and other.cost is None
                else (self.cost or 0.0) + (other.cost or 0.0))
        return SpendDelta(self.decisions + other.decisions, self.reads + other.reads,
                          self.input_tokens + other.input_tokens,
                          self.output_tokens + other.output_tokens,
                          self.gpu_seconds + other.gpu_seconds, cost)


def projected_total(spent: float, done: int, total: int) -> float | None:
    """The run's projected total: what ``done`` decisions spent, scaled to ``total`` (None
    before the first is done)."""
    if done <= 0:
        return None
    return spent / done * max(total, done)


def describe_spend(spend: SpendDelta, *, projected: float | None = None,
                   max_cost: float | None = None) -> str:
    """One line on what a run spent: dollars when priced (with the projected total and the
    budget when known), always the tokens, GPU-seconds and reads (requests sent to the model
    server) they came from."""
    used = (f"{spend.input_tokens:,} input + {spend.output_tokens:,} output tokens, "
            f"{spend.gpu_seconds:,.1f} GPU-seconds, {spend.reads:,} reads")
    if spend.cost is None:
        budget = "" if max_cost is None else f"; budget ${max_cost:,.4f}"
        return f"no price set: {used}{budget}"
    parts = [f"${spend.cost:,.4f} so far"]
    if projected is not None:
        parts.append(f"projected ${projected:,.4f}")
    if max_cost is not None:
        parts.append(f"budget ${max_cost:,.4f}")
    return f"{', '.join(parts)} ({used})"
