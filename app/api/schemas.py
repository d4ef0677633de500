"""Request and response bodies of the API: Jev's ``/v1/systemone`` shapes and dreads' runs.

The Jev request is validated here (a wrong shape is a 422 with FastAPI's list of errors, as
Jev answers); what the shapes allow but dreads cannot ask (a box question, too many levels) is a
400 from ``app.api.jev``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChoiceAnswerOut",
    "ModelOut",
    "ModelsOut",
    "NoulAnswerOut",
    "OpenAIModelOut",
    "QuestionDiagnostics",
    "QuestionIn",
    "RecordIn",
    "ScoreAnswerOut",
    "SystemOneIn",
    "SystemOneOut",
    "UsageOut",
]

#: Jev content: text, or any JSON object or array (written into the prompt as JSON).
Content = str | dict[str, Any] | list[Any]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoulCriteriaIn(_In):
    true: Content | None = Field(None, description="What counts as a yes answer.")
    false: Content | None = Field(None, description="What counts as a no answer.")


class NoulIn(_In):
    type: Literal["noul"]
    instructions: Content | None = Field(None, description="The yes/no question or statement.")
    criteria: NoulCriteriaIn | None = None


class ChoiceIn(_In):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[str, Content | None] = Field(
        description="Option name -> when it applies (null: the name alone).")


class ScoreIn(_In):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(
        min_length=1, description="Ordered level descriptions; a level's position is its score.")


class BoxIn(_In):
    type: Literal["box"]
    instructions: Content | None = None


QuestionIn = Annotated[NoulIn | ChoiceIn | ScoreIn | BoxIn, Field(discriminator="type")]


class RecordIn(_In):
    """dreads extension: record this request's answers into a run, for ``dreads report``."""

    run: str = Field(min_length=1, max_length=200, description="Run name (created if new).")
    id: str | None = Field(None, description="Decision id in the run (default: request id).")
    cell: str | None = Field(None, description="Cell of the decision, for per-cell figures.")
    expected: dict[str, Any] | None = Field(
        None, description="Question name -> expected label or option, for the report.")


class SystemOneIn(BaseModel):
    """Jev's request: a state and named questions about it."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="The served model's name, or jev-latest / jev-preview.")
    state: Content = Field(description="The content every question refers to.")
    questions: dict[str, QuestionIn] = Field(min_length=1)
    assets: dict[str, Any] | None = Field(
        None, description="Images: not supported (the served model reads text).")
    dreads: RecordIn | None = Field(
        None, description="dreads extension: record the answers into a run.")


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


AnswerOut = Annotated[NoulAnswerOut | ChoiceAnswerOut | ScoreAnswerOut,
                      Field(discriminator="type")]


class UsageOut(BaseModel):
    input_tokens: int = Field(description="Prompt tokens of each canvas's first draw, summed.")
    output_tokens: int = Field(description="Always 0: a diffusion read generates nothing.")


class QuestionDiagnostics(BaseModel):
    """dreads' diagnostics of one answer (see ``dreads export``)."""

    label: str
    option: str
    probs: dict[str, float] = Field(description="Mean probability per canvas label.")
    top_prob: float
    stderr: float | None
    agreement: float | None
    draws: int
    stop_reason: str
    label_mass: float
    min_label_mass: float
    argmax_is_label: bool
    entropy: float


class RequestDiagnostics(BaseModel):
    reads: int
    questions: dict[str, QuestionDiagnostics]
    recorded: dict[str, Any] | None = Field(
        None, description="Where the answers were recorded (run, decision id), or why not.")


class SystemOneOut(BaseModel):
    model: str
    answers: dict[str, AnswerOut]
    usage: UsageOut
    diagnostics: RequestDiagnostics


class ModelOut(BaseModel):
    name: str
    description: str
    release_date: str


class OpenAIModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="When this server started (epoch seconds).")
    owned_by: str = "dreads"


class ModelsOut(BaseModel):
    """Both shapes at once: Jev's ``models`` and OpenAI's list (``object``, ``data``)."""

    object: Literal["list"] = "list"
    data: list[OpenAIModelOut] = Field(description="OpenAI's list: the served model.")
    models: list[ModelOut] = Field(description="Jev's list: the served model and its aliases.")
