"""A decision too long for the model, told from its length: the state (as its prompt holds
it) and its longest instructions against max_model_len tokens of the most characters a token
covers; anything that may fit is let through to be tokenized."""

from __future__ import annotations

from dataclasses import replace

from app.engine import Decision, parse_decision
from app.engine.state_length import state_chars, state_too_long


def _decision(state: object, instructions: str = "Is this text spam?") -> Decision:
    raw = {"id": "d", "state": state,
           "questions": {"spam": {"type": "noul", "instructions": instructions}}}
    return parse_decision(raw)


def test_the_bound_is_max_model_len_times_chars_per_token() -> None:
    fits = _decision("x" * (1000 * 4 - 18))
    assert state_too_long(fits, 1000, 4) is None
    over = _decision("x" * (1000 * 4 - 17))
    assert state_too_long(over, 1000, 4) == (
        "its state is 3,983 characters and its longest instructions 18, more than the model "
        "can read: max_model_len 1,000 tokens of at most 4 characters each is 4,000 "
        "characters; shorten it or split it into several decisions")


def test_a_json_state_counts_as_the_prompt_writes_it() -> None:
    decision = _decision({"clause": "é" * 10})
    assert state_chars(decision) == len('{"clause": "' + "é" * 10 + '"}')
    assert state_chars(replace(decision, state=None)) == 0
