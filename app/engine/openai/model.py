"""The body of OpenAI's ``POST /v1/decisions`` as pydantic models: what is well-formed; and
the answers of its Decision, one model per question type.

Two readers share the question, choice and level models: ``dreads serve`` and its job files
(``DecisionsBody``, OpenAI's hosted API: ``input_json`` parts, ``prompt_cache_key``,
``metadata``, up to 400 questions) and the simulator's copy of vLLM 0.33 (``app.sim``
narrows instructions to text and has a request model of its own). What a reader can ask
(dreads: 26 choices at most, unique values and labels, no blank names or labels) is checked
after this, by the reader, and is not part of the shape; non-user messages are refused here,
with what to send instead. ``input_image`` parts are taken as OpenAI's hosted API takes them
(a data URL or an http(s) URL in ``image_url``); the reader reads them in the input only.
Imported only where a body is read: ``import app.engine`` and reading a stored decision never
load pydantic.

Tagged unions carry their tags in pydantic's error locations: the question types, the part
types, and ``string`` / ``array`` for a field that is text or a list. ``errors`` drops them
to write OpenAI's ``param``, so no field may be named like a tag.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_LEVELS",
    "MAX_OPENAI_CHOICES",
    "MAX_QUESTIONS",
    "TAGS",
    "ChoiceAnswerOut",
    "ChoiceIn",
    "ChoiceProbabilityOut",
    "ChoiceQuestionIn",
    "DecisionsBody",
    "LevelIn",
    "MessageIn",
    "PartIn",
    "PredicateAnswerOut",
    "PredicateIn",
    "QuestionIn",
    "ScoreAnswerOut",
    "ScoreProbabilityOut",
    "ScoreQuestionIn",
    "Text",
    "type_name",
]

MAX_OPENAI_CHOICES = 255  #: OpenAI's (and vLLM's) limit per choice question
MAX_LEVELS = 10  #: OpenAI's limit, and the ten digits of vLLM's score read
MAX_QUESTIONS = 400  #: OpenAI's limit per request

#: The tags in error locations (not field names): question and part types, text or list.
TAGS = frozenset({"predicate", "choice", "score", "input_text", "input_json", "input_image",
                  "string", "array"})

Text = Annotated[StrictStr, Field(max_length=1048576)]  #: vLLM's limit on a text field

def type_name(value: Any) -> str:
    """A JSON value's type, as a message names it (``got number``)."""
    return "null" if value is None else "boolean" if isinstance(value, bool) else (
        "string" if isinstance(value, str) else "array" if isinstance(value, list)
        else "object" if isinstance(value, dict)
        else "number" if isinstance(value, (int, float)) else type(value).__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- content: a string, or parts (dreads serve's; vLLM reads text only) ----------------------

class InputTextIn(_Strict):
    type: Literal["input_text"]
    text: StrictStr
    prompt_cache_breakpoint: Any = None


def _json_data(value: Any) -> Any:
    if not isinstance(value, (dict, list)):
        raise PydanticCustomError("json_data", "must be a JSON object or an array of objects, "
                                  "got {got}", {"got": type_name(value)})
    return value


class InputJsonIn(_Strict):
    type: Literal["input_json"]
    data: Annotated[Any, AfterValidator(_json_data)]


class InputImageIn(_Strict):
    """OpenAI's image part: a data URL or an http(s) URL. ``detail`` is taken and has no
    effect: the model reads every image at its processor's one size."""

    type: Literal["input_image"]
    image_url: Text
    detail: Literal["low", "high", "auto", "original"] | None = None
    prompt_cache_breakpoint: Any = None


PartIn = Annotated[InputTextIn | InputJsonIn | InputImageIn, Field(discriminator="type")]


def _string_or_array(value: Any) -> str | None:
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else None


TextOrParts = Annotated[
    Annotated[StrictStr, Tag("string")] | Annotated[list[PartIn], Tag("array"),
                                                    Field(min_length=1)],
    Discriminator(_string_or_array, custom_error_type="string_or_array",
                  custom_error_message="must be a string or an array")]


# -- questions (shared with the simulator's vLLM models) ------------------------------------

class ChoiceIn(_Strict):
    value: StrictStr | StrictBool
    description: Text | None = None


class LevelIn(_Strict):
    label: Text
    description: Text | None = None


class PredicateIn(_Strict):
    type: Literal["predicate"]
    instructions: TextOrParts
    name: Text | None = None


class ChoiceQuestionIn(_Strict):
    type: Literal["choice"]
    instructions: TextOrParts
    name: Text | None = None
    choices: list[ChoiceIn] = Field(min_length=2, max_length=MAX_OPENAI_CHOICES)


class ScoreQuestionIn(_Strict):
    type: Literal["score"]
    instructions: TextOrParts
    name: Text | None = None
    levels: list[LevelIn] = Field(min_length=2, max_length=MAX_LEVELS)


QuestionIn = Annotated[PredicateIn | ChoiceQuestionIn | ScoreQuestionIn,
                       Field(discriminator="type")]


# -- the request (dreads serve and job files) -----------------------------------------------

class MessageIn(_Strict):
    """A user message; other roles, and tool calls, are refused with what to send instead."""

    role: Literal["user"]
    content: TextOrParts
    type: Literal["message"] = "message"

    @model_validator(mode="before")
    @classmethod
    def _user_only(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        role = value.get("role")
        if role != "user" or value.get("type", "message") != "message":
            what = f"role {role!r}" if role is not None else f"type {value.get('type')!r}"
            raise PydanticCustomError(
                "unsupported_message", "{what} is not supported: send the input as a string "
                "or as user messages (developer, system and assistant messages and tool calls "
                "are not read by this server)", {"what": what})
        return value


class DecisionsBody(_Strict):
    """OpenAI's Decisions request, as ``dreads serve`` and its job files read it."""

    model: StrictStr | None = None
    input: Annotated[
        Annotated[StrictStr, Tag("string")] | Annotated[list[MessageIn], Tag("array"),
                                                        Field(min_length=1)],
        Discriminator(_string_or_array, custom_error_type="string_or_array",
                      custom_error_message="must be a string or an array")]
    questions: list[QuestionIn] = Field(min_length=1, max_length=MAX_QUESTIONS)
    safety_identifier: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    metadata: Any = None


# -- the answers (what ``client.decisions.create`` decodes of each question) -----------------

class PredicateAnswerOut(BaseModel):
    type: Literal["predicate"] = "predicate"
    name: str | None
    probability: float = Field(description="P(true): dreads' mean P(yes) over its draws.")


class ChoiceProbabilityOut(BaseModel):
    value: StrictStr | StrictBool
    probability: float


class ChoiceAnswerOut(BaseModel):
    type: Literal["choice"] = "choice"
    name: str | None
    choice: StrictStr | StrictBool = Field(description="The most probable choice, typed.")
    probabilities: list[ChoiceProbabilityOut]
    confidence: float = Field(description="Top probability x label mass (vLLM's).")


class ScoreProbabilityOut(BaseModel):
    value: int = Field(description="The level's 0-based index.")
    label: str
    probability: float


class ScoreAnswerOut(BaseModel):
    type: Literal["score"] = "score"
    name: str | None
    score: float = Field(description="Expected level, 0-indexed: sum of i * p_i.")
    probabilities: list[ScoreProbabilityOut]
    confidence: float = Field(description="Top probability x label mass (vLLM's).")
