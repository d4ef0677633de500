"""The simulator's ``/v1/decisions`` request model (vLLM 0.33's) shares dreads serve's question,
choice and level models (``app.engine.openai.model``) and narrows what vLLM reads differently."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.engine import parse_decision
from app.engine.openai.client import decisions_request
from app.engine.openai.model import (
    ChoiceIn,
    ChoiceQuestionIn,
    DecisionsBody,
    InputTextIn,
    LevelIn,
    ScoreQuestionIn,
)
from app.engine.openai.request import decision_from_request
from app.sim.decisions import DecisionsRequest, _validation_error
from tests.fixtures.openai_bodies import MIXED_BODY

OPENAI_BODY = MIXED_BODY
JEV_LINE = {"id": "d", "state": {"clause": 4}, "questions": {
    "n": {"type": "noul", "criteria": {"true": "it is", "false": None}},
    "c": {"type": "choice", "criteria": {"a": None, "b": "the other"}},
    "s": {"type": "score", "instructions": "How?", "criteria": ["low", "high"]}}}


@pytest.mark.parametrize("decision", [decision_from_request("r", OPENAI_BODY),
                                      parse_decision(JEV_LINE)], ids=["openai", "jev"])
def test_what_dreads_asks_an_endpoint_is_a_valid_request_for_both_readers(
        decision: Any) -> None:
    body = decisions_request(decision, "dgemma")
    assert DecisionsRequest.model_validate_json(json.dumps(body)).model == "dgemma"
    assert DecisionsBody.model_validate(body).model == "dgemma"


def test_the_question_models_are_shared() -> None:
    request = DecisionsRequest.model_validate(OPENAI_BODY)
    _, choice, score = request.questions
    assert isinstance(choice, ChoiceQuestionIn) and isinstance(score, ScoreQuestionIn)
    assert all(isinstance(c, ChoiceIn) for c in choice.choices)
    assert all(isinstance(lv, LevelIn) for lv in score.levels)


def _sim_error(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ValidationError) as err:
        DecisionsRequest.model_validate_json(json.dumps(body))
    error: dict[str, Any] = _validation_error(err.value)["error"]
    return error


def test_vllm_reads_instructions_as_text_only_where_dreads_serve_takes_parts() -> None:
    parts = [{"type": "input_text", "text": "About billing?"}]
    body = {**OPENAI_BODY, "questions": [{"type": "predicate", "instructions": parts}]}
    (question,) = DecisionsBody.model_validate(body).questions
    assert question.instructions == [InputTextIn(type="input_text", text="About billing?")]
    error = _sim_error(body)
    assert error["type"] == "Bad Request"
    assert error["param"] == "body.questions.0.predicate.instructions"
    assert "string_type" in error["message"]


@pytest.mark.parametrize(("change", "param"), [
    ({"joint": "yes"}, "body.joint"),
    ({"input": [{"role": "user", "content": [{"type": "input_json", "data": {}}]}]},
     "body.input"),  # vLLM leaves pydantic's union branch ("str") out of param
    ({"prompt_cache_key": "k"}, "body.prompt_cache_key"),
    ({"questions": [OPENAI_BODY["questions"][0]] * 201}, "body.questions"),
])
def test_the_vllm_request_keeps_its_own_top_level_rules(change: dict[str, Any],
                                                        param: str) -> None:
    assert _sim_error({**OPENAI_BODY, **change})["param"] == param


def test_an_image_part_is_refused_with_vllms_message() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    error = _sim_error({**OPENAI_BODY, "input": [{"role": "user", "content": [image]}]})
    assert (error["type"], error["param"], error["code"]) == ("Bad Request", "body.input", 400)
    assert ("'loc': 'body.input.0', 'msg': 'Value error, Decisions supports text input only; "
            "images are not supported'") in error["message"]


def test_a_null_description_is_refused_as_vllm_refuses_it() -> None:
    """vLLM 0.33 reads a description as a string: null is a 400 validation error there (dreads
    serve, after OpenAI, reads it as no description)."""
    choice = {"type": "choice", "instructions": "?",
              "choices": [{"value": "a", "description": None}, {"value": "b"}]}
    error = _sim_error({**OPENAI_BODY, "questions": [choice]})
    assert error["param"] == "body.questions.0.choice.choices.0.description"
    request = DecisionsRequest.model_validate(
        {**OPENAI_BODY, "questions": [{**choice, "choices": [{"value": "a"}, {"value": "b"}]}]})
    (question,) = request.questions
    assert isinstance(question, ChoiceQuestionIn)
    assert [c.description for c in question.choices] == ["", ""]
