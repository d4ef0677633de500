"""The one definition of a run's state and of an unanswered question (``app.store.states``)."""

from __future__ import annotations

import pytest

from app.store.states import (
    RunState,
    has_ended,
    is_unanswered,
    run_state,
    settled_statuses,
    shown_status,
    unanswered_count,
)


@pytest.mark.parametrize(("stored", "counts", "state"), [
    ("active", {"done": 4}, RunState.FINISHED),
    ("active", {"done": 3, "failed": 1, "rejected": 2}, RunState.FINISHED),
    ("active", {"done": 3, "leased": 1}, RunState.ACTIVE),
    ("active", {"pending": 2}, RunState.ACTIVE),
    ("active", {}, RunState.ACTIVE),  # nothing stored yet: a submit is writing it
    ("cancelled", {"done": 2, "cancelled": 3}, RunState.CANCELLED),
    ("cancelled", {"done": 2, "leased": 1, "cancelled": 3}, RunState.CANCELLED),
])
def test_the_state_of_a_run(stored: str, counts: dict[str, int], state: RunState) -> None:
    assert run_state(stored, counts) is state


@pytest.mark.parametrize(("state", "remaining", "ended"), [
    (RunState.FINISHED, 0, True), (RunState.CANCELLED, 0, True),
    (RunState.CANCELLED, 1, False), (RunState.ACTIVE, 0, False), (RunState.ACTIVE, 5, False),
])
def test_a_run_has_ended_when_nothing_about_it_changes(state: RunState, remaining: int,
                                                      ended: bool) -> None:
    assert has_ended(state, remaining) is ended


@pytest.mark.parametrize(("status", "run_status", "unanswered"), [
    ("done", "active", True),  # a question its source refused
    ("failed", "active", True), ("rejected", "active", True), ("cancelled", "active", True),
    ("pending", "active", False), ("queued", "active", False), ("leased", "active", False),
    ("pending", "cancelled", True), ("queued", "cancelled", True),
    ("leased", "cancelled", False),  # in flight: it may still be answered
])
def test_an_unanswered_question_is_one_no_answer_is_coming_for(
        status: str, run_status: str, unanswered: bool) -> None:
    shown = shown_status(status, run_status)
    assert is_unanswered(answered=False, shown=shown) is unanswered
    assert is_unanswered(answered=True, shown=shown) is False
    assert (status in settled_statuses(run_status)) is unanswered


def test_the_count_in_sql_never_goes_below_zero() -> None:
    assert unanswered_count(settled_questions=6, answered=4) == 2
    assert unanswered_count(settled_questions=0, answered=1) == 0
