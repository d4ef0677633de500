"""Jev's request and answer models of each question kind (pydantic: imported only where a
request is read or an answer schema is written, as by ``dreads serve``)."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.engine.kinds.base import Content

__all__ = ["ChoiceAnswerOut", "ChoiceIn", "JevModel", "NoulAnswerOut", "NoulCriteriaIn",
           "NoulIn", "ScoreAnswerOut", "ScoreIn", "option_models"]


class JevModel(BaseModel):
    """A Jev request part: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class NoulCriteriaIn(JevModel):
    true: Content | None = Field(None, description="What counts as a yes answer.")
    false: Content | None = Field(None, description="What counts as a no answer.")


class NoulIn(JevModel):
    type: Literal["noul"]
    instructions: Content | None = Field(None, description="The yes/no question or statement.")
    criteria: NoulCriteriaIn | None = None


class ChoiceIn(JevModel):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[str, Content | None] = Field(
        description="Option name -> when it applies (null: the name alone).")


class ScoreIn(JevModel):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(
        min_length=1, description="Ordered level descriptions; a level's position is its score.")


class NoulAnswerOut(BaseModel):
    type: Literal["noul"] = "noul"
    noul: float = Field(description="P(yes).")


class ChoiceAnswerOut(BaseModel):
    type: Literal["choice"] = "choice"
    choice: str
    confidence: float = Field(description="1 - H(p)/ln K.")
    probabilities: dict[str, float]


class ScoreAnswerOut(BaseModel):
    type: Literal["score"] = "score"
    score: float = Field(description="Expected level, 0-indexed: sum of i * p_i.")
    confidence: float
    legend: dict[str, str]
    probabilities: dict[str, float]


@cache
def option_models(name: str) -> tuple[type[BaseModel], type[BaseModel]]:
    """The request and answer models of a kind of named options (``QuestionKind``'s default
    shapes, like a choice's) whose ``type`` is ``name``."""
    title = "".join(part.capitalize() for part in name.replace("-", "_").split("_"))
    type_field: Any = (Literal[name], ...)
    asked = create_model(
        f"{title}In", __base__=JevModel, type=type_field,
        instructions=(Content | None, None),
        criteria=(dict[str, Content | None] | list[str], Field(
            description="Option name -> when it applies (null: the name alone).")))
    fields: dict[str, Any] = {"type": (Literal[name], name), name: (str, ...),
                              "confidence": (float, ...),
                              "probabilities": (dict[str, float], ...)}
    answer = create_model(f"{title}AnswerOut", **fields)
    return asked, answer
