"""The question-kind registry: dreads' three kinds, and a kind registered by a test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine import QuestionKind, kind_names, parse_question, register_kind
from app.engine.kinds import unregister_kind
from app.engine.openai.shapes import PredicateShape
from app.engine.questions import answer_label
from app.errors import InputError


class _Colour(QuestionKind):
    name = "colour"
    title = "colour"
    reply_line = "Answer with the letter of one colour only."


@pytest.fixture
def colour() -> Iterator[QuestionKind]:
    yield register_kind(_Colour())
    unregister_kind("colour")


def test_dreads_kinds_come_first_and_unknown_types_list_them() -> None:
    assert kind_names()[:3] == ("noul", "choice", "score")
    with pytest.raises(InputError, match="unknown type 'box'; use one of 'noul', 'choice', "
                                         "'score'"):
        parse_question("q", {"type": "box", "instructions": "?"})


def test_a_registered_kind_parses_with_the_defaults_of_options(colour: QuestionKind) -> None:
    question = parse_question("q", {"type": "colour", "criteria": {"red": None, "blue": "sky"}})
    assert (question.type, question.labels, question.options) == ("colour", ("A", "B"),
                                                                  ("red", "blue"))
    assert answer_label(question, "blue") == "B"
    asked, answer = colour.jev_models()
    assert asked.model_validate({"type": "colour", "criteria": {"red": None}})
    assert answer.model_validate(colour.jev_answer(question, [0.25, 0.75], 0.5))


def test_a_kind_is_refused_when_it_cannot_be_told_apart() -> None:
    clash = _Colour()
    clash.reply_line = "Answer with yes or no only."  # the yes/no kind's
    with pytest.raises(ValueError, match="reply_line"):
        register_kind(clash)
    long = _Colour()
    long.name = "x" * 17  # longer than the stored question_type column
    with pytest.raises(ValueError, match="1 to 16 characters"):
        register_kind(long)
    with pytest.raises(ValueError, match="dreads' own"):
        unregister_kind("noul")
    impostor = _Colour()
    impostor.name = "noul"  # a plugin may not take the place of one of dreads' own kinds
    with pytest.raises(ValueError, match="dreads' own"):
        register_kind(impostor)
    assert "colour" not in kind_names()


@pytest.mark.parametrize(("given", "label"), [
    ("Yes", "yes"), (True, "yes"), ("y", "yes"), ("1", "yes"),
    ("FALSE", "no"), (False, "no"), ("n", "no"), ("0", "no"),
])
def test_one_set_of_yes_no_words(given: object, label: str) -> None:
    question = parse_question("q", {"type": "noul", "instructions": "?"})
    assert answer_label(question, given) == label
    # an OpenAI predicate's expected value reads the same words
    assert PredicateShape("q").expected_label(question, given) == label
