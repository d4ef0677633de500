"""A question's typed OpenAI shape (``app.engine.openai.shapes``): stored as the same JSON as
before the shapes were typed, so stored runs load; and what each shape does."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from app.engine import (
    decision_from_payload,
    decision_payload,
    parse_decision,
)
from app.engine.openai.client import decisions_request
from app.engine.openai.request import decision_from_request
from app.engine.openai.shapes import (
    ChoiceShape,
    PredicateShape,
    ScoreShape,
    shape_for,
    shape_from_json,
)
from app.errors import InputError
from tests.fixtures.openai_bodies import MIXED_BODY

BODY = MIXED_BODY
#: The ``openai`` field of a payload as dreads wrote it before the shapes were typed.
STORED = {"questions": [
    {"type": "predicate", "name": "billing"},
    {"type": "choice", "name": None, "values": [True, "true"]},
    {"type": "score", "name": "urgency", "labels": ["low", "high"]}]}


def test_the_payload_keeps_todays_json_and_comes_back_typed() -> None:
    decision = decision_from_request("k", BODY)
    payload = decision_payload(decision)
    assert payload["openai"] == STORED
    assert json.dumps(payload["openai"]) == json.dumps(STORED)  # key order too
    again = decision_from_payload("k", None, json.loads(json.dumps(payload)))
    assert again == decision
    assert again.openai == (PredicateShape("billing"), ChoiceShape(None, (True, "true")),
                            ScoreShape("urgency", ("low", "high")))
    choice = again.openai[1]
    assert isinstance(choice, ChoiceShape) and [type(v) for v in choice.values] == [bool, str]


def test_a_payload_stored_before_the_shapes_were_typed_loads() -> None:
    payload = {**decision_payload(decision_from_request("k", BODY)), "openai": STORED}
    decision = decision_from_payload("k", None, payload)
    assert decision.openai is not None
    assert [s.to_json() for s in decision.openai] == STORED["questions"]
    assert decisions_request(decision, "m") == decisions_request(
        decision_from_request("k", BODY), "m")


def test_a_dreads_line_has_no_stored_shapes() -> None:
    decision = parse_decision({"id": "d", "state": "s", "questions": {
        "q": {"type": "noul", "instructions": "Yes?"}}})
    assert "openai" not in decision_payload(decision)
    assert decision_from_payload("d", None, decision_payload(decision)).openai is None


@pytest.mark.parametrize("stored", [
    {"questions": [{"type": "predicate", "name": "billing"}]},  # one shape for three questions
    {"questions": "predicate"},
    {"questions": [{"type": "predicate", "name": "billing"}, {"type": "choice", "name": None},
                   {"type": "score", "name": "urgency", "labels": ["low", "high"]}]},
    {"questions": [{"type": "predicate", "name": "billing"}, {"type": "bool", "name": None},
                   {"type": "score", "name": "urgency", "labels": ["low", "high"]}]},
])
def test_unreadable_stored_shapes_are_an_input_error(stored: dict[str, Any]) -> None:
    payload = {**decision_payload(decision_from_request("k", BODY)), "openai": stored}
    with pytest.raises(InputError, match="decision 'k': "):
        decision_from_payload("k", None, payload)


@pytest.mark.parametrize("shape", [
    PredicateShape(None), PredicateShape("p"), ChoiceShape("c", (True, "true", False)),
    ScoreShape(None, ("low", "high")),
])
def test_shapes_round_trip_through_json(shape: Any) -> None:
    assert shape_from_json(json.loads(json.dumps(shape.to_json()))) == shape


def test_a_dreads_question_has_the_shape_of_its_type() -> None:
    decision = parse_decision({"id": "d", "state": "s", "questions": {
        "n": {"type": "noul", "instructions": "Yes?"},
        "c": {"type": "choice", "criteria": {"a": None, "b": "the other"}},
        "s": {"type": "score", "criteria": ["low", "high"]}}})
    assert decision.questions[0].type == "noul"
    assert [shape_for(q) for q in decision.questions] == [
        PredicateShape("n"), ChoiceShape("c", ("a", "b")), ScoreShape("s", ("low", "high"))]


@pytest.mark.parametrize(("index", "value", "label"), [
    (0, True, "yes"), (0, "False", "no"), (1, True, "A"), (1, "true", "B"), (2, 1, "2"),
    (2, "low", "1"),
])
def test_expected_values_map_to_canvas_labels(index: int, value: Any, label: str) -> None:
    decision = decision_from_request("k", BODY)
    assert decision.openai is not None
    shape, question = decision.openai[index], decision.questions[index]
    assert shape.expected_label(question, value) == label


@pytest.mark.parametrize(("index", "value"), [(0, "maybe"), (1, 1), (1, False), (2, 2),
                                              (2, True)])
def test_an_unknown_expected_value_is_a_value_error(index: int, value: Any) -> None:
    decision = decision_from_request("k", BODY)
    assert decision.openai is not None
    with pytest.raises(ValueError):
        decision.openai[index].expected_label(decision.questions[index], value)


def test_stored_decisions_answers_and_the_client_never_load_pydantic() -> None:
    """``dreads status`` and ``export`` read stored decisions without pydantic; only reading a
    request body (``request``, ``lines``) loads it."""
    code = ("import sys, app.engine, app.engine.openai.answers, app.engine.openai.client; "
            "print(any(m == 'pydantic' or m.startswith('pydantic.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "False"
