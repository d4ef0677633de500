"""Request and response bodies of the API: Jev's ``/v1/systemone`` shapes and dreads' runs.

The Jev request is validated here (a wrong shape is a 422 with FastAPI's list of errors, as
Jev answers; a field the request model does not know is a 400 that names it, as vLLM's
``extra="forbid"`` request model answers: no field is ever dropped unread); what the shapes allow
but dreads cannot ask (a box question, too many levels, audio) is a 400 from ``app.api.jev``.

``SystemOneIn`` takes Jev's fields (``assets``: images by placeholder, as typesafe-sdk sends
them), vLLM 0.33's reader's (``images``, ``instructions``, ``joint``, ``chat_template_kwargs``,
``cache_salt``, ``priority``, ``request_id``, and ``audio`` / ``videos``, which this model
refuses) and dreads' ``dreads`` extension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from app.engine import all_kinds
from app.engine.kinds import Content
from app.engine.limits import MAX_CELL_CHARS, MAX_ID_CHARS, check_run_name, check_text
from app.errors import InputError

__all__ = [
    "AssetIn",
    "ModelOut",
    "ModelsOut",
    "OpenAIModelOut",
    "QuestionDiagnostics",
    "QuestionIn",
    "RecordIn",
    "SystemOneIn",
    "SystemOneOut",
    "UsageOut",
    "as_value_error",
]



class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BoxIn(_In):
    type: Literal["box"]
    instructions: Content | None = None


def _by_type(models: tuple[type[BaseModel], ...]) -> Any:
    """One of ``models``, told apart by their ``type``."""
    return Annotated[Union[models], Field(discriminator="type")]  # noqa: UP007


#: A question of any kind registered when this module is first imported (``app.connect.plugins``
#: registers the installed ones first), or Jev's box, which is refused.
if TYPE_CHECKING:
    QuestionIn: TypeAlias = Any
    AnswerOut: TypeAlias = Any
else:
    QuestionIn = _by_type((*(kind.jev_models()[0] for kind in all_kinds()), BoxIn))
    #: Jev's answer of any registered kind.
    AnswerOut = _by_type(tuple(kind.jev_models()[1] for kind in all_kinds()))


class RecordIn(_In):
    """dreads extension: record this request's answers into a run, for ``dreads report``."""

    run: str = Field(min_length=1, max_length=200, description="Run name (created if new).")
    id: str | None = Field(None, description="Decision id in the run (default: request id).")
    cell: str | None = Field(None, description="Cell of the decision, for per-cell figures.")
    expected: dict[str, Any] | None = Field(
        None, description="Question name -> expected label or option, for the report.")

    @field_validator("run")
    @classmethod
    def _storable_name(cls, value: str) -> str:
        """A name ``POST /v1/runs`` and ``dreads submit`` would take."""
        return as_value_error(check_run_name, value)

    @field_validator("id", "cell")
    @classmethod
    def _storable_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        limit = MAX_ID_CHARS if info.field_name == "id" else MAX_CELL_CHARS
        return None if value is None else as_value_error(
            lambda text: check_text(repr(info.field_name), text, limit), value)


def as_value_error(check: Callable[[str], str], value: str) -> str:
    """``check(value)``, its ``InputError`` as the ``ValueError`` pydantic reports (422)."""
    try:
        return check(value)
    except InputError as exc:
        raise ValueError(exc.message) from None


class AssetIn(_In):
    """Jev's asset: an image, inline (``data_base64`` with its ``format``) or, in a multipart
    request, the bytes of the part it names."""

    type: Literal["image"] | None = Field(None, description="Identifies an image asset.")
    format: Literal["png", "jpg", "jpeg"] | None = Field(
        None, description="The format of data_base64 (the actual one is read from the bytes).")
    data_base64: str | None = Field(None, description="Base64-encoded image data.")
    part: str | None = Field(
        None, description="In a multipart request, the name of the image part this asset uses.")


class SystemOneIn(_In):
    """Jev's request: a state and named questions about it; vLLM 0.33's ``/v1/systemone``
    request as well (its ``images``, ``joint`` and the rest)."""

    model: str = Field(description="The served model's name, or jev-latest / jev-preview.")
    state: Content | None = Field(
        description="The content every question refers to (null: the images alone).")
    questions: dict[str, QuestionIn] = Field(min_length=1)
    images: list[str] | None = Field(
        None, description="Image URLs (http(s)) or data URLs, read before the text in the "
                          "order given (vLLM's reader).")
    assets: dict[str, AssetIn] | None = Field(
        None, description="Jev's images by placeholder: each is read before the text, and "
                          "the placeholder in a string reads as [image N].")
    instructions: str | None = Field(
        None, description="vLLM's reader: context ahead of the questions (refused when set: "
                          "put it in the state or the questions).")
    audio: list[str] | None = Field(None, description="Refused: this model reads images only.")
    videos: list[str] | None = Field(None, description="Refused: this model reads images only.")
    joint: StrictBool | None = Field(
        None, description="Answer the questions on one canvas; must agree with the server's "
                          "read mode when given.")
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="Only enable_thinking: false is taken (reads run thinking off).")
    cache_salt: str | None = Field(
        None, description="vLLM's prefix-cache salt: accepted; it never changes an answer, "
                          "and dreads' reads are not salted.")
    priority: int = Field(0, description="vLLM's scheduling priority: accepted, not used "
                                         "(this server answers in arrival order).")
    request_id: str | None = Field(
        None, description="The request's id (the decision's id when recording, unless "
                          "dreads.id is given).")
    dreads: RecordIn | None = Field(
        None, description="dreads extension: record the answers into a run.")


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
    reads: int = Field(description="Requests sent to the model server for this answer.")
    simulator: bool = Field(
        False, description="The answers come from the simulator (dreads sim), not a model.")
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
