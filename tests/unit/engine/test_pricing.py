"""The spend arithmetic: usage in either naming, prices that are not given price nothing,
the projected total, the line status shows."""

from __future__ import annotations

import pytest

from app.engine.pricing import (
    SpendDelta,
    TokenPrices,
    describe_spend,
    gpu_cost,
    projected_total,
    usage_tokens,
)


def test_usage_in_either_naming_and_malformed_counts_as_zero() -> None:
    assert usage_tokens({"input_tokens": 288, "output_tokens": 4}) == (288, 4)
    assert usage_tokens({"prompt_tokens": 120, "completion_tokens": 2}) == (120, 2)
    assert usage_tokens({"input_tokens": "many", "output_tokens": True}) == (0, 0)
    assert usage_tokens(None) == (0, 0)


def test_a_price_not_given_prices_nothing() -> None:
    assert TokenPrices().cost(10**6, 10**6) is None
    assert TokenPrices(0.10, None).cost(2_000_000, 5) == pytest.approx(0.2)
    assert TokenPrices(None, 0.0).cost(5, 5) == 0.0  # a price of $0 is a price
    assert gpu_cost(3600.0, None) is None
    assert gpu_cost(1800.0, 3.49) == pytest.approx(1.745)


def test_deltas_add_and_keep_no_cost_as_none() -> None:
    a = SpendDelta(1, 2, 100, 4, 0.5, None)
    assert a.plus(SpendDelta(1, 1, 10, 1, 0.5, None)).cost is None
    both = a.plus(SpendDelta(2, 3, 10, 1, 1.0, 0.25))
    assert both == SpendDelta(3, 5, 110, 5, 1.5, 0.25)


def test_projected_total_and_the_status_line() -> None:
    assert projected_total(2.0, 0, 100) is None
    assert projected_total(2.0, 25, 100) == pytest.approx(8.0)
    spent = SpendDelta(25, 60, 12_000, 120, 3.0, 2.0)
    line = describe_spend(spent, projected=8.0, max_cost=5.0)
    assert line.startswith("$2.0000 so far, projected $8.0000, budget $5.0000 (12,000 input")
    unpriced = describe_spend(SpendDelta(25, 60, 12_000, 120, 3.0, None), projected=None)
    assert unpriced.startswith("no price set: 12,000 input + 120 output tokens") and "$" not in \
        unpriced
