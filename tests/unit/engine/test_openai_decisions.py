"""OpenAI Decisions requests as dreads decisions and back (``app.engine.openai``)."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import BaseModel

from app.engine import (
    Answer,
    StopReason,
    decision_from_payload,
    decision_payload,
    parse_decision,
)
from app.engine.openai.answers import openai_answers
from app.engine.openai.errors import DecisionsRequestError, openai_param
from app.engine.openai.model import TAGS, DecisionsBody
from app.engine.openai.request import decision_from_request
from app.engine.openai.shapes import ChoiceShape, PredicateShape, ScoreShape
from app.errors import BadLine, InputError

PREDICATE = {"type": "predicate", "name": "billing", "instructions": "About billing?"}
BOOLS = {"type": "choice", "instructions": "Refund due?",
         "choices": [{"value": True}, {"value": "true", "description": "the word"},
                     {"value": False}, {"value": "false"}]}
SCORE = {"type": "score", "name": "urgency", "instructions": "How urgent?",
         "levels": [{"label": "0"}, {"label": "1", "description": "soon"}, {"label": "2"}]}


def request(*questions: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"model": "dgemma", "input": "I was charged twice.",
            "questions": list(questions) or [PREDICATE], **changes}


def batch(body: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"custom_id": "r1", "method": "POST", "url": "/v1/decisions", "body": body,
            "metadata": metadata}


def test_questions_map_to_noul_choice_and_score_by_name_or_position() -> None:
    decision = decision_from_request("k", request(PREDICATE, BOOLS, SCORE))
    billing, bools, urgency = decision.questions
    assert (billing.id, billing.type, billing.labels) == ("billing", "noul",
                                                          ("yes", "no"))
    assert (bools.id, bools.type, bools.labels) == ("1", "choice",
                                                    ("A", "B", "C", "D"))
    assert bools.options == ("true", '"true"', "false", '"false"')  # typed: four options
    assert bools.descriptions == (None, "the word", None, None)
    assert (urgency.id, urgency.options) == ("urgency", ("0", "1 - soon", "2"))
    assert decision.openai == (PredicateShape("billing"),
                               ChoiceShape(None, (True, "true", False, "false")),
                               ScoreShape("urgency", ("0", "1", "2")))


def test_expected_values_are_typed_and_stored_as_labels_that_survive_the_payload() -> None:
    line = batch(request(PREDICATE, BOOLS, SCORE), cell="c1",
                 expected={"billing": True, "1": "false", "urgency": 0})
    decision = parse_decision(line, line_no=3)
    assert decision.id == "r1" and decision.cell == "c1"
    # "false" the string is option D, not C; level index 0 is label "1", whose text is "0"
    assert dict(decision.expected) == {"billing": "yes", "1": "D", "urgency": "1"}
    again = decision_from_payload(decision.id, decision.cell, decision_payload(decision))
    assert again == decision
    by_label = parse_decision(batch(request(SCORE), expected={"urgency": "2"}))
    assert by_label.expected == {"urgency": "3"}


@pytest.mark.parametrize(("expected", "text"), [
    ({"1": "yes"}, 'metadata.expected.1: "yes" is not among the choices'),
    ({"nope": True}, "names question 'nope'"),
    ({"urgency": 3}, "metadata.expected.urgency: 3 is not a level label"),
    ({"billing": "maybe"}, "a predicate expects true or false"),
])
def test_a_wrong_expected_value_says_which_and_why(expected: dict[str, Any], text: str) -> None:
    with pytest.raises(BadLine, match="line 2: decision 'r1': ") as err:
        parse_decision(batch(request(PREDICATE, BOOLS, SCORE), expected=expected), line_no=2)
    assert text in err.value.reason


def test_a_bare_body_takes_its_id_from_metadata_or_its_line() -> None:
    body = request(metadata={"id": "mine", "cell": "x"})
    assert parse_decision(body, line_no=7).id == "mine"
    assert parse_decision(request(), line_no=7).id == "line-7"
    with pytest.raises(InputError, match="needs an id"):
        parse_decision(request())


def test_input_messages_and_json_parts_become_the_state() -> None:
    data = {"order": 17, "charged": 2}
    one_json = request(input=[{"role": "user", "content": [
        {"type": "input_json", "data": data}]}])
    assert decision_from_request("k", one_json).state == data
    mixed = request(input=[
        {"role": "user", "content": "Hello."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Order:"}, {"type": "input_json", "data": data}]}])
    assert decision_from_request("k", mixed).state == (
        'Hello.\n\nOrder:\n{"order": 17, "charged": 2}')


@pytest.mark.parametrize(("body", "param", "text"), [
    (request({**BOOLS, "choices": [{"value": str(i)} for i in range(27)]}),
     "questions[0].choices", "dreads reads at most 26"),
    (request({**SCORE, "levels": [{"label": str(i)} for i in range(11)]}),
     "questions[0].levels", "at most 10"),
    (request({**PREDICATE, "instructions": [
        {"type": "input_text", "text": "Damaged?"},
        {"type": "input_image", "image_url": "https://x/a.png"}]}),
     "questions[0].instructions", "images in a question's instructions are not read"),
    (request(input=[{"role": "user", "content": [{"type": "input_image"}]}]),
     "input[0].content[0].image_url", "is required"),
    (request(input=[{"role": "system", "content": "Be brief."}]), "input[0]",
     "role 'system' is not supported"),
    (request({**BOOLS, "choices": [{"value": 1}, {"value": 2}]}),
     "questions[0].choices[0].value", "must be a string or a boolean, got number"),
    (request({**BOOLS, "choices": [{"value": True}, {"value": True}]}),
     "questions[0].choices[1].value", "duplicate choice true"),
    (request(PREDICATE, {**SCORE, "name": "billing"}), "questions[1].name",
     "question id 'billing' is already taken by questions[0]"),
    (request({"type": "predicate", "instructions": "x", "criteria": {}}), "questions[0].criteria",
     "unknown field(s) ['criteria']"),
    (request(questions=[]), "questions", "must have 1 to 400 questions"),
    ({"model": "dgemma", "questions": [PREDICATE]}, "input", "is required"),
    (request({"type": "predicate", "name": "a:b", "instructions": "x"}), None, "contains ':'"),
])
def test_requests_dreads_cannot_ask_name_the_field(body: dict[str, Any], param: str | None,
                                                   text: str) -> None:
    with pytest.raises(DecisionsRequestError) as err:
        decision_from_request("k", body)
    assert err.value.param == param
    assert text in err.value.message


def test_input_images_are_the_decisions_images_in_order_as_openai_takes_them() -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    decision = decision_from_request("k", request(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "The parcel."},
                                     {"type": "input_image", "image_url": png,
                                      "detail": "high"}]},
        {"role": "user", "content": [{"type": "input_image",
                                      "image_url": "https://example.com/b.jpg"}]}]))
    assert decision.images == (png, "https://example.com/b.jpg")
    assert decision.state == "The parcel."
    alone = decision_from_request("k", request(input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": png}]}]))
    assert (alone.state, alone.images) == (None, (png,))


def test_a_batch_line_for_another_url_is_refused() -> None:
    line = {**batch(request()), "url": "/v1/chat/completions", "body": request()}
    with pytest.raises(InputError, match="url must be '/v1/decisions'"):
        parse_decision(line)


def _answer(qid: str, qtype: str, probs: dict[str, float]) -> Answer:
    label = max(probs, key=probs.__getitem__)
    return Answer(question_id=qid, question_type=qtype, label=label, option=label, probs=probs,
                  p_yes=probs.get("yes"), expected_level=None, legend=None, confidence=0.5,
                  top_prob=probs[label], stderr=None, agreement=None, draws=1,
                  stop_reason=StopReason.FIXED, label_mass=0.9, min_label_mass=0.9,
                  argmax_is_label=True, entropy=0.5)


def test_answers_come_back_in_openais_shape_with_typed_values() -> None:
    decision = decision_from_request("k", request(PREDICATE, BOOLS, SCORE))
    answers = [_answer("billing", "noul", {"yes": 0.8, "no": 0.2}),
               _answer("1", "choice", {"A": 0.1, "B": 0.6, "C": 0.2, "D": 0.1}),
               _answer("urgency", "score", {"1": 0.2, "2": 0.3, "3": 0.5})]
    predicate, choice, score = openai_answers(decision, reversed(answers))
    assert predicate == {"type": "predicate", "name": "billing", "probability": 0.8}
    assert choice["choice"] == "true" and choice["name"] is None
    assert [p["value"] for p in choice["probabilities"]] == [True, "true", False, "false"]
    assert choice["confidence"] == pytest.approx(0.6 * 0.9)
    assert score["score"] == pytest.approx(0.3 + 2 * 0.5)
    assert score["probabilities"][2] == {"value": 2, "label": "2", "probability": 0.5}


# -- pydantic's errors in OpenAI's terms -------------------------------------------------------
@pytest.mark.parametrize(("body", "param", "message"), [
    (request(zzz=1, aaa=2), "aaa", "unknown field(s) ['aaa', 'zzz']; allowed: ['input', "
     "'metadata', 'model', 'prompt_cache_key', 'prompt_cache_options', 'questions', "
     "'safety_identifier']"),
    # the body's unknown fields are named first, then a question's, then its other errors
    (request({"type": "predicate", "criteria": {}}, zzz=1), "zzz", "unknown field(s) ['zzz']"),
    (request({"type": "choice", "instructions": "x", "choice": [{"value": "a"}]}),
     "questions[0].choice", "questions[0]: unknown field(s) ['choice']; allowed: ['choices', "
     "'instructions', 'name', 'type']"),
    (request(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "y": 1}]}]),
     "input[0].content[0].y", "input[0].content[0]: unknown field(s) ['y']"),
    (request({"type": "bool", "instructions": "x"}), "questions[0].type",
     "questions[0].type: unknown question type 'bool'; use one of ['predicate', 'choice', "
     "'score']"),
    (request({"instructions": "x"}), "questions[0].type", "unknown question type None"),
    (request(input=[{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]),
     "input[0].content[0].type", "unknown part type 'output_text'; use 'input_text' or "
     "'input_json'"),
    (request({**BOOLS, "choices": [{"value": "a"}]}), "questions[0].choices",
     "questions[0].choices: must have 2 to 255 choices, got 1"),
    (request({**SCORE, "levels": [{"label": "0"}]}), "questions[0].levels",
     "questions[0].levels: must have 2 to 10 levels, got 1"),
    (request({**SCORE, "levels": [{"label": "0"}, {"label": "0"}]}),
     "questions[0].levels[1].label", "duplicate level label '0'; labels must be unique"),
    (request({**SCORE, "levels": [{"label": "0"}, {"label": " "}]}),
     "questions[0].levels[1].label", "must not be empty"),
    (request({**PREDICATE, "name": ""}), "questions[0].name", "questions[0].name: must not be "
     "empty"),
    (request({**PREDICATE, "instructions": " "}), "questions[0].instructions", "must not be "
     "empty"),
    (request({**PREDICATE, "instructions": 5}), "questions[0].instructions",
     "questions[0].instructions: must be a string or an array, got number"),
    (request({**BOOLS, "choices": [{"value": "a"}, {"description": "b"}]}),
     "questions[0].choices[1].value", "questions[0].choices[1].value: is required"),
    (request(input=5), "input", "input: must be a string or an array, got number"),
    (request(input=[]), "input", "input: must not be empty"),
    (request(input=[{"role": "user", "content": [{"type": "input_json", "data": "x"}]}]),
     "input[0].content[0].data", "must be a JSON object or an array of objects, got string"),
    (request(model=5), "model", "model: must be a string, got number"),
    (request(questions=[PREDICATE] * 401), "questions", "must have 1 to 400 questions, got 401"),
])
def test_malformed_bodies_name_the_param_in_openais_terms(body: dict[str, Any], param: str,
                                                          message: str) -> None:
    with pytest.raises(DecisionsRequestError) as err:
        decision_from_request("k", body)
    assert err.value.param == param
    assert message in err.value.message


def test_the_callers_own_fields_are_allowed_and_named() -> None:
    body = request(dreads={"run": "r"})
    assert decision_from_request("k", body, extra_keys=("dreads",)).id == "k"
    with pytest.raises(DecisionsRequestError, match=r"unknown field\(s\) \['dreads'\]"):
        decision_from_request("k", body)
    with pytest.raises(DecisionsRequestError, match=r"allowed: \['dreads', 'input'"):
        decision_from_request("k", request(zzz=1), extra_keys=("dreads",))


@pytest.mark.parametrize(("loc", "param"), [
    (("questions", 1, "choices"), "questions[1].choices"),
    (("questions", 0, "choice", "choices", 2, "value", "str"), "questions[0].choices[2].value"),
    (("input", "array", 0, "content", "array", 1, "input_image"), "input[0].content[1]"),
    (("model",), "model"),
    ((), ""),
])
def test_pydantic_locations_are_written_as_openais_param(loc: tuple[Any, ...],
                                                         param: str) -> None:
    assert openai_param(loc) == param


def test_no_field_of_the_body_is_named_like_a_union_tag() -> None:
    """``openai_param`` drops the tags from pydantic's locations: a field named like one
    would vanish from the param."""
    seen: set[str] = set()
    pending: list[type[BaseModel]] = [DecisionsBody]
    while pending:
        model = pending.pop()
        for name, info in model.model_fields.items():
            assert name not in TAGS | {"str", "bool"}, (model.__name__, name)
            pending += [m for m in _models_in(info.annotation) if m.__name__ not in seen]
        seen.add(model.__name__)
    assert {"PredicateIn", "ChoiceIn", "LevelIn", "MessageIn", "InputJsonIn"} <= seen


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]
