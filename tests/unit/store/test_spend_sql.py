"""The spend line of a run's totals: a priced run that has recorded nothing yet shows its
prices ($0 so far) and budget, not "no price set"."""

from __future__ import annotations

from app.engine.pricing import SpendDelta, TokenPrices
from app.store.spend_sql import RunPrices, RunSpendTotals


def test_a_priced_run_that_spent_nothing_yet_shows_its_prices_not_no_price() -> None:
    nothing = SpendDelta()
    priced = RunSpendTotals(nothing, prices=RunPrices(TokenPrices(0.10, None), 1.0))
    line = priced.line(0, 5)
    assert line.startswith("$0.0000 so far, budget $1.0000 (0 input + 0 output tokens")
    assert priced.as_dict(done=0, total=5)["cost_usd"] == 0.0
    unpriced = RunSpendTotals(nothing, prices=RunPrices(TokenPrices(), 1.0))
    assert unpriced.line(0, 5).startswith("no price set: ")
    assert unpriced.line(0, 5).endswith("; budget $1.0000")
    assert unpriced.as_dict()["cost_usd"] is None
