"""``DecisionFlow``: the sans-I/O loop of one decision (requests out, results in)."""

from __future__ import annotations

from app.engine.types import (
    Answer,
    DecisionPlan,
    DrawRecord,
    ReadRequest,
    ReadResult,
    ReadSettings,
    TextTokenizer,
)

__all__ = ["DecisionFlow", "build_probe_request"]


class DecisionFlow:
    """Draws of every read unit of a plan until each unit's stop rule says stop."""

    def __init__(self, plan: DecisionPlan, settings: ReadSettings, *, vocab_size: int,
                 replicate: int = 0) -> None:
        self.plan = plan
        self.settings = settings
        self.vocab_size = vocab_size
        self.replicate = replicate

    def next_requests(self) -> list[ReadRequest]:
        """One next draw per unit not yet stopped; [] once done."""
        raise NotImplementedError

    def record(self, request: ReadRequest, result: ReadResult) -> None:
        """Fold a result. Raises MalformedResponse (state unchanged)."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        raise NotImplementedError

    @property
    def n_reads(self) -> int:
        raise NotImplementedError

    def answers(self) -> tuple[Answer, ...]:
        """One answer per question, decision order."""
        raise NotImplementedError

    def draws(self) -> tuple[DrawRecord, ...]:
        """Every question's raw material per draw."""
        raise NotImplementedError


def build_probe_request(settings: ReadSettings, tokenizer: TextTokenizer) -> ReadRequest:
    """A tiny noul read for readiness checks."""
    raise NotImplementedError
