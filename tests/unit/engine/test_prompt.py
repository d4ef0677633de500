"""Prompt layouts, state serialisation, and parse_messages inverting both layouts."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import (
    SYSTEM_INSTRUCTION,
    Layout,
    build_messages,
    parse_decision,
    parse_messages,
    serialize_state,
)


def decision(state: Any, instructions: str = "Is the sky blue?") -> Any:
    return parse_decision({"id": "d", "state": state, "questions": {
        "n": {"type": "noul", "instructions": instructions,
              "criteria": {"true": "it is\nblue", "false": None}},
        "c": {"type": "choice", "instructions": "Which colour?",
              "criteria": {"red": "warm", "blue": None}},
        "s": {"type": "score", "instructions": "How sure?", "criteria": ["low", "high"]},
    }})


@pytest.mark.parametrize(("state", "text"), [
    ("plain text", "plain text"),
    ({"clause": "Preis über 5 €", "n": 1}, '{"clause": "Preis über 5 €", "n": 1}'),
    (["日本語"], '["日本語"]'),
    (3, "3"),
])
def test_serialize_state_keeps_non_ascii(state: Any, text: str) -> None:
    assert serialize_state(state) == text


def test_document_first_layout() -> None:
    msgs = build_messages(decision("The sky is blue."), [0, 1, 2], ["q0", "q1", "q2"],
                          Layout.DOCUMENT_FIRST)
    assert msgs[0] == {"role": "system", "content": SYSTEM_INSTRUCTION}
    user = msgs[1]["content"]
    assert user.startswith("Document:\nThe sky is blue.\n\nQuestions:\nq0: Is the sky blue?\n")
    assert "  yes: it is\n    blue\n" in user
    assert "  A: red: warm\n  B: blue\n" in user
    assert "q2: How sure?\n  1: low\n  2: high\n" in user
    assert "  no:" not in user


def test_reference_layout_puts_questions_in_system() -> None:
    msgs = build_messages(decision({"a": "é"}), [1], ["q0"], Layout.REFERENCE)
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Questions:\nq0: Which")
    assert msgs[1] == {"role": "user", "content": '{"a": "é"}'}


def test_document_first_shares_the_state_prefix_across_questions() -> None:
    d = decision("shared state")
    a = build_messages(d, [0], ["q0"], Layout.DOCUMENT_FIRST)
    b = build_messages(d, [1], ["q0"], Layout.DOCUMENT_FIRST)
    assert a[0] == b[0]
    assert a[1]["content"].split("Questions:")[0] == b[1]["content"].split("Questions:")[0]


@pytest.mark.parametrize("layout", list(Layout))
@pytest.mark.parametrize(("state", "instructions"), [
    ("The sky is blue.", "Is the sky blue?"),
    ({"x": "Ünïcode ✓"}, "Multi-line\n  instructions\n\nq1: tricky"),
    ("State with\n\nQuestions:\nq0: a fake block", "Real question?"),
    ("", "Empty state?"),
])
def test_parse_messages_inverts_build_messages(layout: Layout, state: Any,
                                               instructions: str) -> None:
    d = decision(state, instructions)
    msgs = build_messages(d, [0, 1, 2], ["q0", "q1", "q2"], layout)
    parts = parse_messages(msgs)
    assert parts.state_text == serialize_state(state)
    assert dict(parts.questions) == {"q0": instructions, "q1": "Which colour?",
                                     "q2": "How sure?"}


def test_parse_messages_rejects_foreign_prompts() -> None:
    with pytest.raises(ValueError, match="Document"):
        parse_messages([{"role": "system", "content": "hi"}, {"role": "user", "content": "x"}])
