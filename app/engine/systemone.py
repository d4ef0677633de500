"""A decision asked of a ``/v1/systemone`` endpoint (Jev's shape) and its answers read back.
Pure: no I/O. (``app.api.jev`` is the other direction: dreads serving that shape.)

    Decision --systemone_request--> {"model", "state", "questions"}   (one request, all questions)
    response --read_systemone-----> EndpointAnswers (one draw per question, refusals, usage)

The request's questions are the decision's own Jev specs (``questions_spec``); its images go in
vLLM's ``images`` field (``image_urls``: an http(s) or data URL as the decision gives it, the
endpoint fetching a URL itself; a ``file://`` image as the data URL of its bytes, read by the
caller, since the endpoint cannot read this host's files). Answers are
read by question id, each by its kind (``QuestionKind.endpoint_probs``): noul ``noul`` = P(yes)
(or ``probabilities`` yes/no); choice ``probabilities`` by option name; score ``probabilities``
by 0-indexed level. An endpoint that gives only the chosen option (or level) puts probability 1
on it. Diagnostics: ``confidence``
per answer, and ``label_mass`` / ``argmax_is_label`` from ``diagnostics[question]`` (vLLM 0.33)
or ``diagnostics.questions[question]`` (``dreads serve``); anything missing stays None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.endpoint import (
    EndpointAnswers,
    one_draw,
    optional_flag,
    optional_number,
    refusal_of,
    usage_of,
)
from app.engine.kinds import kind_of
from app.engine.questions import questions_spec
from app.engine.types import Answer, Decision, DrawRecord, Refusal
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
            question, index, kind_of(question).endpoint_probs(question, raw),
            label_mass=optional_number(diag.get("label_mass")),
            argmax_is_label=optional_flag(diag.get("argmax_is_label")),
            confidence=optional_number(raw.get("confidence")), latency_ms=latency_ms)
        answers.append(answer)
        draws.append(draw)
    return EndpointAnswers(tuple(answers), tuple(draws), tuple(refusals), usage_of(body))
