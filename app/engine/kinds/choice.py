"""The choice kind: named options by position, labelled A, B, ... (Jev's ``choice``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.engine.kinds.base import Content, Family, JevModel, QuestionKind

__all__ = ["CHOICE", "ChoiceKind"]


class ChoiceIn(JevModel):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[str, Content | None] = Field(
        description="Option name -> when it applies (null: the name alone).")


class ChoiceAnswerOut(BaseModel):
    type: Literal["choice"] = "choice"
    choice: str
    confidence: float = Field(description="1 - H(p)/ln K.")
    probabilities: dict[str, float]


class ChoiceKind(QuestionKind):
    """Options by position: the base class's defaults."""

    name = "choice"
    title = "choice"
    family = Family.NOMINAL
    default_instruction = "Which option applies?"
    reply_line = "Answer with the letter of one option only."
    jev_in = ChoiceIn
    jev_out = ChoiceAnswerOut


CHOICE = ChoiceKind()
