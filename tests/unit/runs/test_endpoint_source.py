"""A decision answered by a decision endpoint (``EndpointSource``, ``--answer-by``): vLLM's
``/v1/systemone`` gives what dreads' own reads give at one draw, and a throttled endpoint is
waited out (its ``retry-after``), not failed. The real clients and the simulator in this process
(``tests.fixtures.memory_upstream``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import PolicyName, ReadSettings, parse_decision, source_spec
from app.runs.answer import EndpointSource, answer_decision
from app.tokenizer.hf import HFTextTokenizer
from tests.fixtures.memory_upstream import InMemoryEndpoint, InMemoryUpstream, memory_sim

DECISION = parse_decision({
    "id": "d",
    "state": "Clause 4.2: the Supplier delivers within 30 days. Clause 9.1: delivery takes 45 "
             "days.",
    "questions": {
        "conflict": {"type": "noul", "instructions": "Do the two clauses contradict each other?"},
        "who": {"type": "choice", "instructions": "Who bears the delay?",
                "criteria": {"supplier": "the party that delivers", "customer": None}},
        "risk": {"type": "score", "instructions": "How risky is it?",
                 "criteria": ["none", "low", "some", "high", "severe"]},
    },
})


def _by_question(answers: Any) -> dict[str, Any]:
    return {a.question_id: a for a in answers}


async def test_systemone_answers_as_dreads_first_draw(standin_tokenizer: HFTextTokenizer) -> None:
    sim = memory_sim()
    source = EndpointSource(source_spec("systemone"), InMemoryEndpoint(sim, "systemone"), "dgemma")
    upstream = InMemoryUpstream(sim)
    settings = ReadSettings(model="dgemma", tokenizer=standin_tokenizer.name,
                            policy=PolicyName.FIXED, fixed_draws=1)
    try:
        asked = await source.answer(DECISION, replicate=0)
        read = await answer_decision(DECISION, settings, standin_tokenizer, upstream)
    finally:
        await source.endpoint.aclose()
        await upstream.aclose()
    theirs, ours = _by_question(asked.answers), _by_question(read.answers)
    assert asked.n_reads == 1 and source.n_requests == 1
    assert theirs["conflict"].p_yes == pytest.approx(ours["conflict"].p_yes, abs=1e-12)
    assert theirs["who"].option == ours["who"].option
    assert theirs["risk"].expected_level == pytest.approx(ours["risk"].expected_level,
                                                          abs=1e-12)
    assert asked.input_tokens > 0 and asked.output_tokens > 0


async def test_a_throttled_endpoint_is_waited_out() -> None:
    sim = memory_sim()
    sim.limits.storm(0.5, 0.1)  # 429 with retry-after 0.1 s on every request for 0.5 s
    endpoint = InMemoryEndpoint(sim, "systemone", give_up_s=30)
    source = EndpointSource(source_spec("systemone"), endpoint, "dgemma")
    try:
        asked = await source.answer(DECISION, replicate=0)
    finally:
        await endpoint.aclose()
    assert {a.question_id for a in asked.answers} == {"conflict", "who", "risk"}
    assert endpoint.counts["throttled"] >= 1 and sim.stats()["throttled"] >= 1
