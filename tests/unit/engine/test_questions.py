"""parse_question / parse_decision / storage round trip: shapes, labels, every rejection."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest

from app.engine import (
    Decision,
    Layout,
    build_messages,
    decision_from_payload,
    decision_payload,
    parse_decision,
    parse_question,
)
from app.engine.questions import answer_label
from app.errors import BadLine, InputError

NOUL = {"type": "noul", "instructions": "Do these clauses conflict?"}
CHOICE = {"type": "choice", "instructions": "Who pays?",
          "criteria": {"buyer": "the party that buys", "seller": None, "nobody": None}}
SCORE = {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}


def line(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "X3|C1|conflict", "state": "Clause 4.2 ...",
                            "questions": {"conflict": NOUL}}
    base.update(over)
    return base


@pytest.mark.parametrize(("spec", "qtype", "labels", "options"), [
    (NOUL, "noul", ("yes", "no"), ("yes", "no")),
    (CHOICE, "choice", ("A", "B", "C"), ("buyer", "seller", "nobody")),
    (SCORE, "score", ("1", "2", "3"), ("none", "minor", "major")),
    ({**SCORE, "criteria": [f"l{i}" for i in range(9)]}, "score",
     tuple("123456789"), tuple(f"l{i}" for i in range(9))),
    ({**SCORE, "criteria": [f"l{i}" for i in range(10)]}, "score",
     tuple("ABCDEFGHIJ"), tuple(f"l{i}" for i in range(10))),
    ({**CHOICE, "criteria": {f"o{i}": None for i in range(26)}}, "choice",
     tuple(string.ascii_uppercase), tuple(f"o{i}" for i in range(26))),
    ({**CHOICE, "criteria": {"only": None}}, "choice", ("A",), ("only",)),
    ({**SCORE, "criteria": ["single"]}, "score", ("1",), ("single",)),
])
def test_question_shapes_and_labels(spec: dict[str, Any], qtype: str,
                                    labels: tuple[str, ...], options: tuple[str, ...]) -> None:
    q = parse_question("q", spec)
    assert (q.type, q.labels, q.options) == (qtype, labels, options)


def test_jev_content_objects_become_json_text_in_the_prompt() -> None:
    q = parse_question("t", {"type": "choice", "instructions": {"task": "tone", "lang": "fr"},
                             "criteria": {"calm": {"cue": "polite"}, "angry": None}})
    assert q.instructions == '{"task": "tone", "lang": "fr"}'
    assert q.descriptions == ('{"cue": "polite"}', None)
    s = parse_question("u", {"type": "score", "criteria": ["low", {"level": "high"}]})
    assert s.options == ("low", '{"level": "high"}')


@pytest.mark.parametrize(("spec", "default"), [
    ({"type": "choice", "criteria": {"a": None, "b": None}}, "Which option applies?"),
    ({"type": "score", "criteria": ["low", "high"]}, "Which level applies?"),
    ({"type": "noul", "criteria": {"true": "spam"}}, "Which answer applies?"),
])
def test_questions_without_instructions_get_the_types_default_line(
        spec: dict[str, Any], default: str) -> None:
    """Jev lets instructions be left out when the criteria say enough: the question keeps none
    (the vllm layout then writes no question line) and dreads' own layouts write a default."""
    question = parse_question("q", spec)
    assert question.instructions == ""
    decision = Decision(id="d", state="s", questions=(question,))
    user = build_messages(decision, [0], ["q0"], Layout.DOCUMENT_FIRST)[1]["content"]
    assert f"q0: {default}" in user


def test_noul_criteria_become_descriptions() -> None:
    q = parse_question("c", {**NOUL, "criteria": {"true": "they conflict", "false": "they agree"}})
    assert q.descriptions == ("they conflict", "they agree")


@pytest.mark.parametrize(("spec", "needle"), [
    ({"type": "bool", "instructions": "x"}, "unknown type 'bool'"),
    ({"instructions": "x"}, "unknown type None"),
    ({"type": "noul"}, "a noul question needs 'instructions', or 'criteria' describing"),
    ({"type": "noul", "criteria": {"true": None}}, "a noul question needs 'instructions'"),
    ({"type": "noul", "instructions": "  "}, "'instructions' must not be blank"),
    ({"type": "noul", "instructions": 3}, "'instructions' must be text, a JSON object or array"),
    ({"type": "choice", "instructions": "x", "criteria": {}}, "choice needs 1 to 26"),
    ({"type": "choice", "instructions": "x"}, "needs 'criteria'"),
    ({"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(27)}},
     "got 27"),
    ({"type": "score", "instructions": "x", "criteria": []}, "score needs 1 to 26"),
    ({"type": "score", "instructions": "x", "criteria": [str(i) for i in range(27)]}, "got 27"),
    ({"type": "score", "instructions": "x", "criteria": {"a": 1}}, "ordered list"),
    ({"type": "score", "instructions": "x", "criteria": ["a", "a"]}, "distinct"),
    ({"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}, '"true"'),
    ("not an object", "must be an object"),
])
def test_bad_question_names_question_and_problem(spec: Any, needle: str) -> None:
    with pytest.raises(InputError) as err:
        parse_question("X3|C1|conflict", spec)
    assert "question 'X3|C1|conflict'" in err.value.message
    assert needle in err.value.message


@pytest.mark.parametrize(("obj", "needle"), [
    (line(state=None), "missing 'state'"),
    ({"id": "d", "questions": {"q": NOUL}}, "missing 'state'"),
    (line(questions={}), "'questions' must be a non-empty object"),
    (line(questions=None), "'questions' must be a non-empty object"),
    (line(id="a:b"), "contains ':' or a newline"),
    (line(id="a\nb"), "contains ':' or a newline"),
    (line(id=""), "decision id must be a non-empty string"),
    (line(questions={"a:b": NOUL}), "question id 'a:b' contains ':'"),
    (line(expected={"other": "yes"}), "names question 'other'"),
    (line(expected={"conflict": "maybe"}), "expected value 'maybe'"),
    (line(expected=["yes"]), "'expected' must be an object"),
    (line(cell=5), "'cell' must be a string"),
    ({"state": "s", "questions": {"q": NOUL}}, "missing 'id'"),
    ({"custom_id": "c1", "body": "x"}, "needs 'body'"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_line_reports_line_number_and_reason(obj: Any, needle: str) -> None:
    with pytest.raises(BadLine) as err:
        parse_decision(obj, line_no=7)
    assert err.value.line_no == 7
    assert str(err.value).startswith("line 7: ")
    assert needle in err.value.reason


def test_without_line_number_raises_input_error_naming_the_decision() -> None:
    with pytest.raises(InputError) as err:
        parse_decision(line(questions={"conflict": {"type": "x", "instructions": "y"}}))
    assert not isinstance(err.value, BadLine)
    assert "decision 'X3|C1|conflict': question 'conflict': unknown type" in err.value.message


@pytest.mark.parametrize(("spec", "value", "label"), [
    (NOUL, "yes", "yes"), (NOUL, "No", "no"), (NOUL, True, "yes"), (NOUL, False, "no"),
    (CHOICE, "seller", "B"), (CHOICE, "C", "C"), (CHOICE, "buyer", "A"),
    (SCORE, "major", "3"), (SCORE, "2", "2"), (SCORE, 0, "1"), (SCORE, 2, "3"),
])
def test_expected_is_normalised_to_the_canvas_label(spec: dict[str, Any], value: Any,
                                                    label: str) -> None:
    d = parse_decision(line(questions={"q": spec}, expected={"q": value}))
    assert d.expected == {"q": label}


@pytest.mark.parametrize(("spec", "value"), [(SCORE, 3), (SCORE, True), (CHOICE, "D"),
                                             (CHOICE, 0), (NOUL, "perhaps")])
def test_expected_outside_labels_is_rejected(spec: dict[str, Any], value: Any) -> None:
    with pytest.raises(InputError, match="not among its labels"):
        parse_decision(line(questions={"q": spec}, expected={"q": value}))


PREDICATE = {"type": "choice", "instructions": "Is it void?",
             "criteria": {"true": None, "false": None}}
DIGIT_LEVELS = {"type": "score", "instructions": "Which?", "criteria": ["3", "2", "1"]}


@pytest.mark.parametrize(("spec", "value", "label"), [
    (NOUL, True, "yes"), (CHOICE, "seller", "B"), (SCORE, "major", "3"), (SCORE, 2, "3"),
    (PREDICATE, "yes", "A"), (PREDICATE, "No", "B"), (PREDICATE, False, "B"),
    (PREDICATE, "true", "A"), (DIGIT_LEVELS, "1", "1"),  # a label reads as the label first
])
def test_an_answer_keys_answer_reads_as_expected_does(spec: dict[str, Any], value: Any,
                                                      label: str) -> None:
    assert answer_label(parse_question("q", spec), value) == label


@pytest.mark.parametrize(("spec", "value"), [(CHOICE, "maybe"), (SCORE, 3), (PREDICATE, "y?")])
def test_an_answer_not_offered_is_refused(spec: dict[str, Any], value: Any) -> None:
    with pytest.raises(InputError, match="not among its labels"):
        answer_label(parse_question("q", spec), value)


def test_dreads_line_keeps_order_cell_and_state() -> None:
    d = parse_decision(line(cell="horizon116/house", state={"clause": "Preis über 5 €"},
                            questions={"b": NOUL, "a": CHOICE, "c": SCORE}))
    assert [q.id for q in d.questions] == ["b", "a", "c"]
    assert d.cell == "horizon116/house"
    assert d.state == {"clause": "Preis über 5 €"}


@pytest.mark.parametrize("where", ["top", "body", "metadata", "body_metadata"])
def test_openai_batch_line(where: str) -> None:
    extra = {"cell": "c1", "expected": {"q": "no"}}
    body: dict[str, Any] = {"model": "jev-latest", "state": "s", "questions": {"q": NOUL}}
    obj: dict[str, Any] = {"custom_id": "req-1", "method": "POST", "url": "/v1/systemone",
                           "body": body}
    if where == "top":
        obj.update(extra)
    elif where == "body":
        body.update(extra)
    elif where == "metadata":
        obj["metadata"] = extra
    else:
        body["metadata"] = extra
    d = parse_decision(obj)
    assert (d.id, d.cell, dict(d.expected), d.state) == ("req-1", "c1", {"q": "no"}, "s")


def test_integer_id_is_accepted_as_text() -> None:
    assert parse_decision(line(id=17)).id == "17"


def test_payload_round_trip() -> None:
    d = parse_decision(line(cell="c", state={"k": ["é", 1]},
                            questions={"n": {**NOUL, "criteria": {"true": "t", "false": None}},
                                       "c": CHOICE, "s": SCORE},
                            expected={"n": True, "c": "nobody", "s": 1}))
    payload = decision_payload(d)

    assert json.loads(json.dumps(payload)) == payload
    assert decision_from_payload(d.id, d.cell, payload) == d
