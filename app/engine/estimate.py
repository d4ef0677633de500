"""What a run will read and cost, before anything is sent: the arithmetic of ``--dry-run``.
Pure: no I/O.

    DecisionPlan --ReadTally.add--> reads per draw, tokens per read (summed over a file)
    ReadTally + draws + replicates + Prices --estimate--> Estimate (minimum .. maximum)

A read unit (one canvas) is read once per draw. The draw policy bounds the draws of a unit:
``fixed`` N draws exactly; ``agree`` and ``entropy`` 1 to ``max_draws``; a decision endpoint
reads each unit once (vLLM's reader: one read per question, one draw). Per read the server
runs the prompt (input tokens), denoises the whole canvas (canvas tokens) and returns
``max_tokens`` canvas rows (output tokens, what its ``usage`` counts as completion). Token
prices apply to input and output tokens; a GPU price per hour applies to time, known only from
a read rate the user gives. No price, no dollar figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.pricing import HOUR_S, MILLION_TOKENS
from app.engine.sources import plans_reads
from app.engine.types import DecisionPlan, PolicyName, ReadSettings

__all__ = ["Estimate", "Prices", "ReadTally", "Span", "draw_span", "estimate"]


@dataclass(frozen=True)
class Span:
    """A range: the least and the most (equal when the policy fixes the count)."""

    low: float
    high: float

    def times(self, factor: float) -> Span:
        return Span(self.low * factor, self.high * factor)

    def plus(self, other: Span) -> Span:
        return Span(self.low + other.low, self.high + other.high)

    def as_dict(self) -> dict[str, float]:
        return {"min": self.low, "max": self.high}


@dataclass(frozen=True)
class Prices:
    """Prices given for an estimate (None: not given). Token prices are dollars per million
    tokens; ``gpu_per_hour`` is dollars per GPU hour, turned into a cost only with
    ``reads_per_s``, a read rate measured on that GPU."""

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    gpu_per_hour: float | None = None
    reads_per_s: float | None = None

    @property
    def tokens_priced(self) -> bool:
        return self.input_per_mtok is not None or self.output_per_mtok is not None


@dataclass
class ReadTally:
    """Reads per draw and their tokens, summed over the decisions of a file (one replicate).

    Example::

        tally = ReadTally()
        tally.add(plan_decision(decision, settings, tokenizer))
        estimate(tally, draw_span(settings), replicates=1, prices=Prices())
    """

    decisions: int = 0
    questions: int = 0
    trivial: int = 0  #: questions with one label: answered without a read
    units: int = 0  #: reads per draw
    input_tokens: int = 0  #: prompt tokens, summed over the units
    output_tokens: int = 0  #: canvas rows returned (max_tokens), summed over the units
    canvas_tokens: int = 0  #: canvas width, summed over the units
    prompt_min: int | None = None  #: the shortest prompt of one read
    prompt_max: int = 0

    def add(self, plan: DecisionPlan) -> None:
        """Count one planned decision."""
        self.decisions += 1
        self.questions += len(plan.decision.questions)
        self.trivial += len(plan.trivial)
        for unit in plan.units:
            prompt = len(unit.prompt_ids)
            self.units += 1
            self.input_tokens += prompt
            self.output_tokens += unit.max_tokens
            self.canvas_tokens += unit.width
            self.prompt_min = prompt if self.prompt_min is None else min(self.prompt_min, prompt)
            self.prompt_max = max(self.prompt_max, prompt)

    def count_unplanned(self, questions: int) -> None:
        """A decision whose reads cannot be planned here (an endpoint plans its own)."""
        self.decisions += 1
        self.questions += questions


@dataclass(frozen=True)
class Estimate:
    """What a run reads and costs, from its least to its most draws."""

    draws: Span  #: draws per read unit
    reads: Span
    input_tokens: Span
    output_tokens: Span
    canvas_tokens: Span
    token_cost: Span | None = None  #: dollars; None without a token price
    gpu_hours: Span | None = None  #: None without a read rate
    gpu_cost: Span | None = None  #: dollars; None without a GPU price and a read rate

    def as_dict(self) -> dict[str, dict[str, float] | None]:
        spans = {"draws": self.draws, "reads": self.reads, "input_tokens": self.input_tokens,
                 "output_tokens": self.output_tokens, "canvas_tokens": self.canvas_tokens,
                 "token_cost": self.token_cost, "gpu_hours": self.gpu_hours,
                 "gpu_cost": self.gpu_cost}
        return {name: span.as_dict() if span else None for name, span in spans.items()}


def draw_span(settings: ReadSettings) -> Span:
    """Draws of one read unit under the run's policy: ``fixed`` N to N, ``agree`` and
    ``entropy`` 1 to ``max_draws``, a decision endpoint 1 (its reader reads once)."""
    if not plans_reads(settings.answer_by):
        return Span(1, 1)
    if settings.policy == PolicyName.FIXED:
        n = max(1, settings.fixed_draws)
        return Span(n, n)
    return Span(1, max(1, settings.max_draws))


def estimate(tally: ReadTally, draws: Span, *, replicates: int, prices: Prices) -> Estimate:
    """The reads, tokens and costs of ``tally``'s decisions, each asked ``replicates`` times,
    at ``draws`` per read unit.

    Args:
        tally: the file's decisions, planned.
        draws: draws per read unit (``draw_span``).
        replicates: copies of each decision.
        prices: the prices given; a cost is given only for the prices set.
    """
    per_draw = draws.times(replicates)
    inputs = per_draw.times(tally.input_tokens)
    outputs = per_draw.times(tally.output_tokens)
    reads = per_draw.times(tally.units)
    token_cost = None
    if prices.tokens_priced:
        token_cost = inputs.times((prices.input_per_mtok or 0.0) / MILLION_TOKENS).plus(
            outputs.times((prices.output_per_mtok or 0.0) / MILLION_TOKENS))
    gpu_hours = reads.times(1.0 / (prices.reads_per_s * HOUR_S)) if prices.reads_per_s else None
    gpu_cost = (gpu_hours.times(prices.gpu_per_hour)
                if gpu_hours is not None and prices.gpu_per_hour is not None else None)
    return Estimate(draws=draws, reads=reads, input_tokens=inputs, output_tokens=outputs,
                    canvas_tokens=per_draw.times(tally.canvas_tokens), token_cost=token_cost,
                    gpu_hours=gpu_hours, gpu_cost=gpu_cost)
