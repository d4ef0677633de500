"""Helpers of the upstream integration tests: requests built as dreads builds them."""

from __future__ import annotations

from typing import Any

from app.engine import (
    DecisionFlow,
    DecisionPlan,
    ReadRequest,
    ReadSettings,
    parse_decision,
    plan_decision,
)
from app.engine.wire import build_request
from app.tokenizer.hf import HFTextTokenizer

NOUL = {"type": "noul", "instructions": "Do these two clauses contradict each other?"}
STATE = "Clause 4.2: the tenant pays rent monthly. Clause 9.1: no rent is ever due."


def decision_obj(i: int = 0, **questions: Any) -> dict[str, Any]:
    return {"id": f"d{i}", "state": f"{STATE} (copy {i})", "questions": questions or {"c": NOUL}}


def plan(tokenizer: HFTextTokenizer, obj: dict[str, Any] | None = None,
         settings: ReadSettings | None = None) -> DecisionPlan:
    return plan_decision(parse_decision(obj or decision_obj()), settings or ReadSettings(),
                         tokenizer)


def request(tokenizer: HFTextTokenizer, *, i: int = 0, draw: int = 0,
            settings: ReadSettings | None = None) -> ReadRequest:
    """The first draw's request of decision ``i`` (distinct i -> distinct bodies)."""
    settings = settings or ReadSettings()
    unit = plan(tokenizer, decision_obj(i), settings).units[0]
    return build_request(unit, settings, draw=draw, seed=1000 + i * 10 + draw,
                         vocab_size=tokenizer.info.vocab_size)


def flow(tokenizer: HFTextTokenizer, obj: dict[str, Any] | None = None,
         settings: ReadSettings | None = None) -> DecisionFlow:
    settings = settings or ReadSettings()
    return DecisionFlow(plan(tokenizer, obj, settings), settings,
                        vocab_size=tokenizer.info.vocab_size)
