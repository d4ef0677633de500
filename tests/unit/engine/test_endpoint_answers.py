"""A decision asked of a decision endpoint and its answers read back (pure converters):
``app.engine.systemone`` (Jev's shape), ``app.engine.openai`` (OpenAI's), and the
answer-source fields of the run settings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.engine import (
    AnswerBy,
    ReadSettings,
    StopReason,
    parse_decision,
    settings_from_dict,
    settings_hash,
    settings_to_dict,
)
from app.engine.openai.client import decisions_request, read_decisions
from app.engine.openai.request import decision_from_request
from app.engine.systemone import read_systemone, systemone_request
from app.errors import ConfigError, MalformedResponse

QUESTIONS: dict[str, Any] = {
    "conflict": {"type": "noul", "instructions": "Do the clauses contradict each other?"},
    "who": {"type": "choice", "instructions": "Who bears the delay?",
            "criteria": {"supplier": "the party that delivers", "customer": None}},
    "risk": {"type": "score", "instructions": "How risky?", "criteria": ["none", "low", "high"]},
}
DECISION = parse_decision({"id": "d1", "cell": "c", "state": {"clause": 4},
                           "questions": QUESTIONS, "expected": {"conflict": "yes"}})


def vllm_systemone_body() -> dict[str, Any]:
    """A response as vLLM 0.33 (and dreads sim) write it."""
    return {
        "answers": {
            "conflict": {"type": "noul", "noul": 0.8,
                         "probabilities": {"yes": 0.8, "no": 0.2}, "confidence": 0.72},
            "who": {"type": "choice", "choice": "customer",
                    "probabilities": {"supplier": 0.25, "customer": 0.75}, "confidence": 0.6},
            "risk": {"type": "score", "score": 1.2, "legend": {"0": "none", "1": "low",
                                                                "2": "high"},
                     "probabilities": {"0": 0.2, "1": 0.4, "2": 0.4}, "confidence": 0.3},
        },
        "usage": {"input_tokens": 321, "output_tokens": 6},
        "diagnostics": {"conflict": {"label_mass": 0.9, "argmax_is_label": True},
                        "who": {"label_mass": 0.8, "argmax_is_label": False},
                        "risk": {"label_mass": 0.75, "argmax_is_label": True}},
    }


def test_systemone_request_asks_every_question_once() -> None:
    body = systemone_request(DECISION, "dgemma")
    assert body == {"model": "dgemma", "state": {"clause": 4}, "questions": {
        "conflict": QUESTIONS["conflict"], "who": QUESTIONS["who"], "risk": QUESTIONS["risk"]}}


def test_systemone_answers_keep_vllm_diagnostics() -> None:
    read = read_systemone(DECISION, vllm_systemone_body(), latency_ms=12.0)
    conflict, who, risk = read.answers
    assert conflict.p_yes == pytest.approx(0.8) and conflict.label == "yes"
    assert who.label == "B" and who.option == "customer"
    assert who.probs == pytest.approx({"A": 0.25, "B": 0.75})
    assert risk.expected_level == pytest.approx(1.2) and risk.label == "2"
    assert [a.label_mass for a in read.answers] == [0.9, 0.8, 0.75]
    assert [a.argmax_is_label for a in read.answers] == [True, False, True]
    assert [a.endpoint_confidence for a in read.answers] == [0.72, 0.6, 0.3]
    assert all(a.draws == 1 and a.stop_reason is StopReason.ENDPOINT for a in read.answers)
    assert [(d.unit, d.draw, d.seed, d.read.label_logprobs, d.read.argmax_id)
            for d in read.draws] == [(0, 0, None, None, None), (1, 0, None, None, None),
                                     (2, 0, None, None, None)]
    assert read.draws[1].latency_ms == 12.0
    assert read.usage == {"input_tokens": 321, "output_tokens": 6}
    assert read.refusals == ()


def test_what_an_endpoint_does_not_say_is_unavailable_not_zero() -> None:
    body = vllm_systemone_body()
    del body["diagnostics"], body["usage"]
    body["answers"]["conflict"] = {"type": "noul", "noul": 0.3}  # Jev's own noul: P(yes) only
    body["answers"]["who"] = {"type": "choice", "choice": "supplier"}
    read = read_systemone(DECISION, body)
    conflict, who, _ = read.answers
    assert conflict.probs == pytest.approx({"yes": 0.3, "no": 0.7})
    assert conflict.endpoint_confidence is None
    assert who.probs == {"A": 1.0, "B": 0.0}
    for answer in read.answers:
        assert answer.label_mass is None and answer.min_label_mass is None
        assert answer.argmax_is_label is None
    assert all(d.read.label_mass is None and d.read.argmax_is_label is None for d in read.draws)
    assert read.usage is None


def test_dreads_serve_diagnostics_are_read_too() -> None:
    body = vllm_systemone_body()
    body["diagnostics"] = {"reads": 3, "questions": {"who": {"label_mass": 0.5,
                                                             "argmax_is_label": True}}}
    read = read_systemone(DECISION, body)
    assert [a.label_mass for a in read.answers] == [None, 0.5, None]


def test_a_refused_question_is_a_refusal_and_the_others_are_answered() -> None:
    body = vllm_systemone_body()
    body["answers"]["who"] = {"type": "refusal", "refusal": "I cannot judge liability."}
    read = read_systemone(DECISION, body)
    assert [a.question_id for a in read.answers] == ["conflict", "risk"]
    assert [d.unit for d in read.draws] == [0, 2]
    (refusal,) = read.refusals
    assert (refusal.question_id, refusal.reason) == ("who", "I cannot judge liability.")


@pytest.mark.parametrize("change", [
    lambda b: b["answers"].pop("risk"),
    lambda b: b["answers"]["who"]["probabilities"].pop("supplier"),
    lambda b: b["answers"]["conflict"].update(probabilities=None, noul="high"),
    lambda b: b.pop("answers"),
])
def test_an_unreadable_systemone_answer_is_malformed(change: Any) -> None:
    body = vllm_systemone_body()
    change(body)
    with pytest.raises(MalformedResponse):
        read_systemone(DECISION, body)


OPENAI_BODY = {
    "model": "gpt-decide", "input": "I was charged twice.",
    "questions": [
        {"type": "predicate", "name": "billing", "instructions": "About billing?"},
        {"type": "choice", "instructions": "Refund due?",
         "choices": [{"value": True}, {"value": "true", "description": "the word"},
                     {"value": False}]},
        {"type": "score", "name": "urgency", "instructions": "How urgent?",
         "levels": [{"label": "low"}, {"label": "high", "description": "today"}]},
    ],
}


def test_decisions_request_gives_back_the_request_a_decision_came_from() -> None:
    decision = decision_from_request("r1", OPENAI_BODY)
    body = decisions_request(decision, "gpt-decide")
    assert body == OPENAI_BODY


def test_decisions_request_of_dreads_questions() -> None:
    body = decisions_request(DECISION, "m")
    assert body["input"] == '{"clause":4}' or body["input"].startswith("{")
    predicate, choice, score = body["questions"]
    assert predicate == {"type": "predicate", "name": "conflict",
                         "instructions": "Do the clauses contradict each other?"}
    assert choice["choices"] == [{"value": "supplier", "description": "the party that delivers"},
                                 {"value": "customer"}]
    assert score["levels"] == [{"label": "none"}, {"label": "low"}, {"label": "high"}]


def test_decisions_answers_typed_values_confidence_and_usage() -> None:
    decision = decision_from_request("r1", OPENAI_BODY)
    usage = {"input_tokens": 40, "output_tokens": 3, "total_tokens": 43}
    response = {"model": "gpt-decide", "usage": usage, "answers": [
        {"type": "predicate", "name": "billing", "probability": 0.9},
        {"type": "choice", "name": None, "choice": "true", "confidence": 0.5,
         "probabilities": [{"value": False, "probability": 0.1},
                           {"value": "true", "probability": 0.6},
                           {"value": True, "probability": 0.3}]},
        {"type": "refusal", "name": "urgency", "refusal": "not enough context"},
    ]}
    read = read_decisions(decision, response)
    billing, refund = read.answers
    assert billing.p_yes == pytest.approx(0.9)
    assert refund.probs == pytest.approx({"A": 0.3, "B": 0.6, "C": 0.1})
    assert refund.option == '"true"' and refund.endpoint_confidence == 0.5
    assert billing.label_mass is None and billing.argmax_is_label is None
    assert read.usage == usage
    assert [(r.question_id, r.reason) for r in read.refusals] == [("urgency",
                                                                  "not enough context")]


def test_decisions_answers_of_another_count_are_malformed() -> None:
    decision = decision_from_request("r1", OPENAI_BODY)
    with pytest.raises(MalformedResponse):
        read_decisions(decision, {"answers": [{"type": "predicate", "probability": 0.5}]})


def test_a_run_answered_by_reads_keeps_its_settings_and_hash() -> None:
    settings = ReadSettings()
    stored = settings_to_dict(settings)
    assert not {"answer_by", "answer_url", "answer_rps", "answer_concurrency"} & set(stored)
    assert settings_from_dict(stored) == settings


def test_the_answer_source_is_hashed_and_the_budget_is_not() -> None:
    by_sim = ReadSettings(answer_by=AnswerBy.SYSTEMONE, answer_url="http://x:8000")
    stored = settings_to_dict(by_sim)
    assert stored["answer_by"] == "systemone" and settings_from_dict(stored) == by_sim
    assert settings_hash(by_sim) != settings_hash(ReadSettings())
    assert settings_hash(by_sim) != settings_hash(replace(by_sim, answer_by=AnswerBy.DECISIONS))
    assert settings_hash(by_sim) == settings_hash(replace(by_sim, answer_rps=5.0,
                                                          answer_concurrency=2))


def test_an_endpoint_run_needs_its_url() -> None:
    with pytest.raises(ConfigError, match="--answer-url"):
        settings_from_dict({"answer_by": "decisions"})
    with pytest.raises(ConfigError, match="--answer-by"):
        settings_from_dict({"answer_url": "http://x"})
