"""The estimate's arithmetic (``app.engine.estimate``): reads from the least to the most draws,
tokens per read, and a cost only for the prices given."""

from __future__ import annotations

import pytest

from app.engine import (
    AnswerBy,
    Decision,
    DecisionPlan,
    PolicyName,
    Prices,
    ReadSettings,
    ReadTally,
    ReadUnit,
    Span,
    draw_span,
    estimate,
)


def _unit(index: int, prompt: int, rows: int, width: int) -> ReadUnit:
    return ReadUnit(index=index, question_indices=(index,), messages=(),
                    template_ids=(0,) * width, width=width, slots=(), logprob_ids=(),
                    prompt_ids=(1,) * prompt, max_tokens=rows)


def _tally() -> ReadTally:
    """Two decisions: one of two read questions (prompts 100 and 140), one of a read question
    (prompt 60) and a one-label question answered without a read."""
    tally = ReadTally()
    two = Decision(id="a", state="s", questions=())
    tally.add(DecisionPlan(decision=two, units=(_unit(0, 100, 2, 16), _unit(1, 140, 2, 16))))
    tally.add(DecisionPlan(decision=two, units=(_unit(0, 60, 2, 16),), trivial=(1,)))
    return tally


@pytest.mark.parametrize(("settings", "span"), [
    (ReadSettings(), Span(1, 4)),
    (ReadSettings(max_draws=6, policy=PolicyName.ENTROPY), Span(1, 6)),
    (ReadSettings(policy=PolicyName.FIXED, fixed_draws=3), Span(3, 3)),
    (ReadSettings(answer_by=AnswerBy.DECISIONS, max_draws=8), Span(1, 1)),
])
def test_draws_follow_the_policy(settings: ReadSettings, span: Span) -> None:
    assert draw_span(settings) == span


def test_tally_sums_reads_and_tokens_per_draw() -> None:
    tally = _tally()
    assert (tally.decisions, tally.units, tally.trivial) == (2, 3, 1)
    assert (tally.input_tokens, tally.output_tokens, tally.canvas_tokens) == (300, 6, 48)
    assert (tally.prompt_min, tally.prompt_max) == (60, 140)


def test_reads_and_tokens_scale_with_draws_and_replicates() -> None:
    est = estimate(_tally(), Span(1, 4), replicates=2, prices=Prices())
    assert est.reads == Span(6, 24)
    assert est.input_tokens == Span(600, 2400)
    assert est.output_tokens == Span(12, 48)
    assert est.canvas_tokens == Span(96, 384)


def test_no_price_gives_no_dollar_figure() -> None:
    est = estimate(_tally(), Span(1, 4), replicates=1, prices=Prices())
    assert (est.token_cost, est.gpu_hours, est.gpu_cost) == (None, None, None)


def test_token_cost_is_tokens_times_price_per_million() -> None:
    prices = Prices(input_per_mtok=0.10, output_per_mtok=2.0)
    est = estimate(_tally(), Span(1, 4), replicates=1, prices=prices)
    assert est.token_cost is not None
    assert est.token_cost.low == pytest.approx(300 * 0.10 / 1e6 + 6 * 2.0 / 1e6)
    assert est.token_cost.high == pytest.approx(1200 * 0.10 / 1e6 + 24 * 2.0 / 1e6)


def test_the_openai_decisions_price_charges_input_only() -> None:
    est = estimate(_tally(), Span(1, 1), replicates=1, prices=Prices(input_per_mtok=0.10))
    assert est.token_cost == Span(pytest.approx(300 * 0.10 / 1e6),
                                  pytest.approx(300 * 0.10 / 1e6))


def test_a_gpu_price_needs_a_read_rate() -> None:
    unpriced = estimate(_tally(), Span(1, 4), replicates=1, prices=Prices(gpu_per_hour=3.49))
    assert unpriced.gpu_cost is None and unpriced.gpu_hours is None
    est = estimate(_tally(), Span(1, 4), replicates=1,
                   prices=Prices(gpu_per_hour=3.49, reads_per_s=0.001))
    assert est.gpu_hours is not None and est.gpu_cost is not None
    assert est.gpu_hours.low == pytest.approx(3 / 0.001 / 3600)
    assert est.gpu_cost.high == pytest.approx(12 / 0.001 / 3600 * 3.49)
