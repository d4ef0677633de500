"""Who answers a run's decisions, as a registry: one ``SourceSpec`` per answer source.

A run's ``answer_by`` names its source. ``reads`` (the default) is dreads' own reads: each
decision planned into canvases here and read draw by draw through an ``Upstream``. Every other
source is a decision endpoint: each decision, all its questions, posted as one request to the
spec's ``path`` under the run's ``answer_url``, its reply read as one draw per question. The
request and the reply are the spec's (``ask``, ``read``); ``app.runs.answer`` sends them.

Adding a source is one ``SourceSpec`` given to ``register_source`` (by a plugin: an entry point
in the group ``dreads.answer_sources``, see ``app.connect.plugins``); ``--answer-by``, the API's
``answer_by``, the settings hash, the estimate, the queue a run's chunks go to and the runner
follow from the spec (no other module compares source names).

    >>> source_spec("decisions").path
    '/v1/decisions'
    >>> plans_reads("reads"), plans_reads("systemone")
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.engine.endpoint import EndpointAnswers
from app.engine.openai.client import decisions_request, read_decisions, reader_decision
from app.engine.systemone import read_systemone, systemone_request
from app.engine.types import AnswerBy, Decision
from app.errors import ConfigError

__all__ = ["SOURCES", "AskRequest", "ReadReply", "SourceSpec", "plans_reads", "register_source",
           "source_names", "source_spec", "stored_plans_reads"]


class AskRequest(Protocol):
    """The JSON body that asks every question of ``decision`` of ``model`` at once, with its
    images as ``image_urls`` (in the decision's order)."""

    def __call__(self, decision: Decision, model: str, *,
                 image_urls: Sequence[str] | None = None) -> dict[str, Any]: ...


class ReadReply(Protocol):
    """The answers, draws and refusals of the endpoint's reply ``body`` to ``decision``.

    Raises:
        MalformedResponse: the reply is not of the endpoint's shape.
    """

    def __call__(self, decision: Decision, body: Mapping[str, Any], *,
                 latency_ms: float = 0.0) -> EndpointAnswers: ...


def _as_given(decision: Decision, model: str) -> Decision:
    return decision


_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class SourceSpec:
    """One answer source: what a run answered by it sends, and how its reply is read."""

    #: stored as the run's ``answer_by``; what ``--answer-by`` and the API's ``answer_by`` take
    name: str
    summary: str  #: one line for ``--answer-by``'s help
    #: the route each decision is posted to under the run's ``answer_url`` ("": dreads' reads)
    path: str = ""
    ask: AskRequest | None = None  #: builds a decision's request
    read: ReadReply | None = None  #: reads its reply
    #: The estimate's hook (``--dry-run``): the decision as the endpoint's reader reads it
    #: (given the run's model), whose reads are counted with vLLM's reader's plan.
    asked: Callable[[Decision, str], Decision] = _as_given

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(f"answer source name {self.name!r}: use lowercase letters, "
                              "digits, '-' and '_' (at most 40, a letter first)")
        endpoint = (bool(self.path), self.ask is not None, self.read is not None)
        if any(endpoint) and not all(endpoint):
            raise ConfigError(f"answer source {self.name!r} needs a path, ask and read")
        if self.path and not self.path.startswith("/"):
            raise ConfigError(f"answer source {self.name!r}: path {self.path!r} must begin "
                              "with '/'")

    @property
    def plans_reads(self) -> bool:
        """dreads plans and reads each decision itself (multi-draw, full diagnostics), rather
        than one request per decision to an endpoint that plans its own reads."""
        return not self.path


#: The sources this process knows, by name (the built-in ones, then any registered).
SOURCES: dict[str, SourceSpec] = {spec.name: spec for spec in (
    SourceSpec(AnswerBy.READS, "dreads' own multi-draw reads, the default"),
    SourceSpec(AnswerBy.SYSTEMONE, "a /v1/systemone endpoint (Jev's shape)",
               path="/v1/systemone", ask=systemone_request, read=read_systemone),
    SourceSpec(AnswerBy.DECISIONS, "a /v1/decisions endpoint (OpenAI's shape)",
               path="/v1/decisions", ask=decisions_request, read=read_decisions,
               asked=reader_decision),
)}


def register_source(spec: SourceSpec) -> SourceSpec:
    """Add ``spec`` (a decision endpoint's) to this process's sources; registering the same
    spec again does nothing.

    Raises:
        ConfigError: ``spec`` plans reads (only dreads' own reads do), or another source has
            its name.
    """
    if spec.plans_reads:
        raise ConfigError(f"answer source {spec.name!r} has no path: a registered source "
                          "posts each decision to an endpoint (path, ask, read)")
    known = SOURCES.get(spec.name)
    if known is not None and known != spec:
        raise ConfigError(f"answer source {spec.name!r} is registered already")
    SOURCES[spec.name] = spec
    return spec


def source_names() -> tuple[str, ...]:
    return tuple(SOURCES)


def source_spec(name: str) -> SourceSpec:
    """The source called ``name``.

    Raises:
        ConfigError: no source has that name; the message lists what to pass.
    """
    spec = SOURCES.get(str(name))
    if spec is None:
        choices = ", ".join(source_names())
        raise ConfigError(f"unknown answer source {str(name)!r}: pass --answer-by {choices} "
                          "(or install the plugin that adds it)")
    return spec


def plans_reads(name: str | None) -> bool:
    """Whether a run answered by ``name`` (None: the default) is read by dreads itself; a
    name this process does not know is a decision endpoint's (plugins add only those)."""
    spec = SOURCES.get(str(name or AnswerBy.READS))
    return spec is not None and spec.plans_reads


def stored_plans_reads(settings: Mapping[str, Any]) -> bool:
    """``plans_reads`` of a run from its stored settings dict (``answer_by`` absent: reads)."""
    return plans_reads(settings.get("answer_by"))
