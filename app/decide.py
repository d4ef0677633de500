"""Driving a decision's reads: ``drive`` (the loop every path shares) and ``answer_decision``
(one decision straight through an upstream: no database, no queue).

``answer_decision`` serves ``dreads decide`` and the API's ``POST /v1/systemone``; the runner
(``app.runner``) calls ``drive`` with leases and storage around it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.engine import (
    Answer,
    Decision,
    DecisionFlow,
    DrawRecord,
    ReadRequest,
    ReadResult,
    ReadSettings,
    TextTokenizer,
    plan_decision,
)
from app.upstream.base import Upstream

__all__ = ["Decided", "answer_decision", "drive"]


@dataclass(frozen=True)
class Decided:
    """A decision's answers with the draws behind them."""

    answers: tuple[Answer, ...]
    draws: tuple[DrawRecord, ...]
    n_reads: int


async def drive(flow: DecisionFlow,
                read: Callable[[ReadRequest], Awaitable[ReadResult]]) -> None:
    """Send each round of reads at once and record them until every question's draw policy
    stops. A failed read is raised once the other reads of its round have ended, so none is
    left running behind the failure.

    Raises:
        UpstreamError: a read failed (after the upstream's own retries) or came back malformed.
    """
    while not flow.done:
        requests = flow.next_requests()
        results = await asyncio.gather(*(read(r) for r in requests), return_exceptions=True)
        for outcome in results:
            if isinstance(outcome, BaseException):
                raise outcome
        for request, outcome in zip(requests, results, strict=True):
            flow.record(request, outcome)  # type: ignore[arg-type]


async def answer_decision(decision: Decision, settings: ReadSettings, tokenizer: TextTokenizer,
                          upstream: Upstream) -> Decided:
    """Plan the decision, send its reads (each round of draws at once) until every question's
    draw policy stops, and fold the answers.

    Raises:
        TemplateError: the question cannot be read (a label not one token, too wide, a prompt
            longer than the upstream's ``max_model_len`` once the upstream knows it).
        UpstreamError: the upstream failed after its retries, or answered malformed rows.
    """
    plan = plan_decision(decision, settings, tokenizer, max_model_len=upstream.max_model_len)
    flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)
    await drive(flow, upstream.read)
    return Decided(flow.answers(), flow.draws(), flow.n_reads)
