"""The choice kind: named options by position, labelled A, B, ... (Jev's ``choice``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine.kinds.base import QuestionKind

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["CHOICE", "ChoiceKind"]


class ChoiceKind(QuestionKind):
    """Options by position: the base class's defaults."""

    name = "choice"
    title = "choice"
    reply_line = "Answer with the letter of one option only."

    def jev_models(self) -> tuple[type[BaseModel], type[BaseModel]]:
        from app.engine.kinds.jev import ChoiceAnswerOut, ChoiceIn

        return ChoiceIn, ChoiceAnswerOut


CHOICE = ChoiceKind()
