"""One decision answered directly against an upstream: no database, no queue.

Used by ``dreads decide`` and by the API's ``POST /v1/systemone``. The runner (``app.runner``)
does the same loop with leases and storage around it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.engine import (
    Answer,
    Decision,
    DecisionFlow,
    DrawRecord,
    ReadSettings,
    TextTokenizer,
    plan_decision,
)
from app.upstream.base import Upstream

__all__ = ["Decided", "answer_decision"]


@dataclass(frozen=True)
class Decided:
    """A decision's answers with the draws behind them."""

    answers: tuple[Answer, ...]
    draws: tuple[DrawRecord, ...]
    n_reads: int


async def answer_decision(decision: Decision, settings: ReadSettings, tokenizer: TextTokenizer,
                          upstream: Upstream) -> Decided:
    """Plan the decision, send its reads (each round of draws at once) until every question's
    draw policy stops, and fold the answers.

    Raises:
        TemplateError: the question cannot be read (a label not one token, too wide).
        UpstreamError: the upstream failed after its retries, or answered malformed rows.
    """
    plan = plan_decision(decision, settings, tokenizer)
    flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)
    while not flow.done:
        requests = flow.next_requests()
        results = await asyncio.gather(*(upstream.read(r) for r in requests))
        for request, result in zip(requests, results, strict=True):
            flow.record(request, result)
    return Decided(flow.answers(), flow.draws(), flow.n_reads)
