"""A decision asked of a ``/v1/systemone`` endpoint (Jev's shape) and its answers read back.
Pure: no I/O. (``app.api.jev`` is the other direction: dreads serving that shape.)

    Decision --systemone_request--> {"model", "state", "questions"}   (one request, all questions)
    response --read_systemone-----> EndpointAnswers (one draw per question, refusals, usage)

The request's questions are the decision's own Jev specs (``questions_spec``); its images go in
vLLM's ``images`` field (``image_urls``: an http(s) or data URL as the decision gives it, the
endpoint fetching a URL itself; a ``file://`` image as the data URL of its bytes, read by the
caller, since the endpoint cannot read this host's files). Answers are
read by question id: noul ``noul`` = P(yes) (or ``probabilities`` yes/no); choice
``probabilities`` by option name; score ``probabilities`` by 0-indexed level. An endpoint that
gives only the chosen option (or level) puts probability 1 on it. Diagnostics: ``confidence``
per answer, and ``label_mass`` / ``argmax_is_label`` from ``diagnostics[question]`` (vLLM 0.33)
or ``diagnostics.questions[question]`` (``dreads serve``); anything missing stays None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.endpoint import (
    EndpointAnswers,
    number,
    one_draw,
    optional_flag,
    optional_number,
    refusal_of,
    usage_of,
)
from app.engine.questions import questions_spec
from app.engine.types import Answer, Decision, DrawRecord, Question, QuestionType, Refusal
from app.errors import MalformedResponse

__all__ = ["read_systemone", "sent_image_url", "systemone_request"]

_SENT_AS_GIVEN = ("http://", "https://", "data:")


def sent_image_url(ref: str) -> bool:
    """Whether an image reference goes to an endpoint as given (an http(s) URL, which the
    endpoint fetches, or a data URL); else (``file://``) its bytes go, as a data URL."""
    return ref.startswith(_SENT_AS_GIVEN)


def systemone_request(decision: Decision, model: str, *,
                      image_urls: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``POST /v1/systemone`` body that asks every question of ``decision`` at once, with
    its images in ``images`` (``image_urls``, in the decision's order; by default its
    references as given).

    Raises:
        ValueError: an image reference that cannot be sent as given (``file://``) and no
            ``image_urls``.
    """
    body: dict[str, Any] = {"model": model, "state": decision.state,
                            "questions": questions_spec(decision.questions)}
    urls = tuple(decision.images if image_urls is None else image_urls)
    if len(urls) != len(decision.images):
        raise ValueError(f"decision {decision.id!r} has {len(decision.images)} image(s) but "
                         f"{len(urls)} URL(s) were given for them")
    unsent = [u for u in urls if not sent_image_url(u)]
    if unsent:
        raise ValueError(f"image {unsent[0][:60]!r} cannot be sent to an endpoint as given: "
                         "pass its bytes as a data URL")
    if urls:
        body["images"] = list(urls)
    return body


def _one_hot(question: Question, index: int) -> list[float]:
    return [1.0 if i == index else 0.0 for i in range(len(question.labels))]


def _noul_probs(question: Question, raw: Mapping[str, Any]) -> list[float]:
    probs = raw.get("probabilities")
    if isinstance(probs, Mapping) and "yes" in probs and "no" in probs:
        return [number(probs["yes"], f"{question.id}.probabilities.yes"),
                number(probs["no"], f"{question.id}.probabilities.no")]
    p_yes = number(raw.get("noul"), f"question {question.id!r}: noul")
    return [p_yes, 1.0 - p_yes]


def _choice_probs(question: Question, raw: Mapping[str, Any]) -> list[float]:
    probs = raw.get("probabilities")
    if isinstance(probs, Mapping):
        missing = [o for o in question.options if o not in probs]
        if missing:
            raise MalformedResponse(f"question {question.id!r}: no probability for option(s) "
                                    f"{missing}")
        return [number(probs[o], f"{question.id}.probabilities[{o!r}]")
                for o in question.options]
    choice = raw.get("choice")
    if choice not in question.options:
        raise MalformedResponse(f"question {question.id!r}: choice {choice!r} is not one of "
                                f"{list(question.options)}")
    return _one_hot(question, question.options.index(choice))


def _score_probs(question: Question, raw: Mapping[str, Any]) -> list[float]:
    probs = raw.get("probabilities")
    n = len(question.labels)
    if isinstance(probs, Mapping):
        keys = [str(i) for i in range(n)]
        if any(k not in probs for k in keys):
            raise MalformedResponse(f"question {question.id!r}: score probabilities need the "
                                    f"levels {keys}, got {sorted(probs)}")
        return [number(probs[k], f"{question.id}.probabilities[{k}]") for k in keys]
    level = round(number(raw.get("score"), f"question {question.id!r}: score"))
    if not 0 <= level < n:
        raise MalformedResponse(f"question {question.id!r}: score {level} is not a level "
                                f"0..{n - 1}")
    return _one_hot(question, level)


_PROBS = {QuestionType.NOUL: _noul_probs, QuestionType.CHOICE: _choice_probs,
          QuestionType.SCORE: _score_probs}


def _diagnostics(body: Mapping[str, Any], qid: str) -> Mapping[str, Any]:
    diag = body.get("diagnostics")
    if not isinstance(diag, Mapping):
        return {}
    own = diag.get(qid)
    if isinstance(own, Mapping):
        return own
    nested = diag.get("questions")
    found = nested.get(qid) if isinstance(nested, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def read_systemone(decision: Decision, body: Mapping[str, Any], *,
                   latency_ms: float = 0.0) -> EndpointAnswers:
    """The answers, draws and refusals of a ``/v1/systemone`` response to
    ``systemone_request(decision, ...)``.

    Raises:
        MalformedResponse: an answer is missing or unreadable.
    """
    answers_raw = body.get("answers")
    if not isinstance(answers_raw, Mapping):
        raise MalformedResponse("the /v1/systemone response has no 'answers' object")
    answers: list[Answer] = []
    draws: list[DrawRecord] = []
    refusals: list[Refusal] = []
    for index, question in enumerate(decision.questions):
        raw = answers_raw.get(question.id)
        if not isinstance(raw, Mapping):
            raise MalformedResponse(f"no answer for question {question.id!r} in the "
                                    "/v1/systemone response")
        refusal = refusal_of(question, raw)
        if refusal is not None:
            refusals.append(refusal)
            continue
        diag = _diagnostics(body, question.id)
        answer, draw = one_draw(
            question, index, _PROBS[question.type](question, raw),
            label_mass=optional_number(diag.get("label_mass")),
            argmax_is_label=optional_flag(diag.get("argmax_is_label")),
            confidence=optional_number(raw.get("confidence")), latency_ms=latency_ms)
        answers.append(answer)
        draws.append(draw)
    return EndpointAnswers(tuple(answers), tuple(draws), tuple(refusals), usage_of(body))
