"""The dreads error tree.

    DreadsError
    ├── InputError            a user input problem: never retried, the message says what to fix
    │   ├── BadLine           one line of a job file (carries line_no)
    │   ├── ImageError        an image of a decision: unreadable, not an image, too large, a
    │   │   │                 ``file://`` outside the allowed directories, unreachable
    │   │   ├── ImageUnreachable  its URL did not answer (at submit: rejected; when a worker
    │   │   │                     fetches it again: transient, kind ``image_unreachable``)
    │   │   └── ImageChanged      its bytes are not the ones checked at submit (kind
    │   │                         ``image_changed``: permanent, never answered)
    │   ├── TemplateError     a label that is not one token, slots that differ, a template too wide
    │   └── RunCancelled      a cancelled run asked to go on: it never runs again
    ├── UpstreamError         talking to the model server
    │   ├── UpstreamUnavailable   transient: refused/reset, timeout, 5xx (retried with backoff)
    │   ├── UpstreamRejected      permanent: vLLM answered 4xx (kind ``bad_request``)
    │   │   ├── ModelNotServed    the server does not serve the request's model: the worker's
    │   │   │                     configuration, not the decision (kind ``not_served``)
    │   │   └── UpstreamUnauthorized  401/403: the API key is missing or wrong: configuration,
    │   │                         not the decision (kind ``unauthorized``)
    │   └── MalformedResponse     a missing row or label logprob (kind ``malformed_response``)
    ├── StoreError            the SQL store
    │   ├── SchemaNotReady        schema missing or behind: run ``dreads db upgrade``
    │   ├── BadDatabaseUrl        a URL dreads cannot use as given (scheme, shape, directory)
    │   ├── StoreConflict         a write met a concurrent one (a run deleted under it, a
    │   │                         deadlock): try again
    │   └── RunSettingsMismatch   resume under different settings / model / canvas
    ├── PublishError          the broker did not take a message: the sweeper publishes it later
    ├── RunPaused             the run paused (the breaker, its budget): ``dreads resume RUN``
    │                         goes on
    └── ConfigError           a bad setting or combination of settings
        └── BudgetReached     a paused run's cost is at its budget: it needs a higher --max-cost

Other modules subclass these where the reason is theirs alone (``app.engine.template``'s
``CanvasOverflow``, ``PromptTooLong``; ``app.engine.openai.errors.DecisionsRequestError``).

Each ``OutcomeKind`` has one ``OutcomeClass``: the infrastructure's (``INFRASTRUCTURE_KINDS``:
a worker lost, an interruption, a pause, an outage, a model not served) or the read's (the
rest). Status, the report, the run page and ``/metrics`` split failures by it.

Each error class names its ``kind``: the ``OutcomeKind`` an attempt that fails with it is
recorded as (the enum below; the attempts table stores its value), and its ``exit_code``: the
status a command that ends with it exits with (``EXIT_*`` below; docs/commands.md#exit-status).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "EXIT_BAD_LINES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INFRASTRUCTURE_KINDS",
    "READ_KINDS",
    "BadDatabaseUrl",
    "BadLine",
    "ConfigError",
    "DreadsError",
    "ImageChanged",
    "ImageError",
    "ImageUnreachable",
    "InputError",
    "MalformedResponse",
    "ModelNotServed",
    "OutcomeClass",
    "OutcomeKind",
    "RunPaused",
    "RunSettingsMismatch",
    "SchemaNotReady",
    "SettingChange",
    "StoreConflict",
    "StoreError",
    "TemplateError",
    "UpstreamError",
    "UpstreamRejected",
    "UpstreamUnauthorized",
    "UpstreamUnavailable",
    "outcome_class",
]


#: The exit statuses every command follows.
EXIT_OK = 0  #: done
EXIT_FAILURE = 1  #: the environment or a runtime failure: a server, the database, the broker
EXIT_USAGE = 2  #: a usage or input error the user fixes (an option, a file, a setting, a name)
EXIT_BAD_LINES = 3  #: done, but lines were bad (only with ``--fail-on-bad-lines``)
EXIT_INTERRUPTED = 130  #: interrupted (Ctrl-C): nothing is lost


class OutcomeClass(StrEnum):
    """Whose an attempt outcome is (``OutcomeKind.outcome_class``): the infrastructure's or
    the read's.

    An infrastructure outcome says nothing about the decision: the attempt was lost, stopped or
    refused by something around the read (a worker, the broker, the database, the server or
    its configuration, an interruption, a pause), and the decision is tried again. A read
    outcome is the read's own: its answer, or a failure the decision would meet again (a
    refused or malformed read, a rejected input, what stays unanswered at the attempt cap).
    Only read outcomes are a property of a cell (``app.report.diagnostics``).
    """

    INFRASTRUCTURE = "infrastructure"
    READ = "read"


class OutcomeKind(StrEnum):
    """How an attempt at a decision ended (``attempts.outcome``), and each error's ``kind``."""

    OK = "ok"  #: answered
    UPSTREAM_UNREACHABLE = "upstream_unreachable"  #: refused/reset connection (transient)
    TIMEOUT = "timeout"  #: no answer in time (transient)
    SERVER_ERROR = "server_error"  #: 5xx (transient)
    BAD_REQUEST = "bad_request"  #: the server answered 4xx: permanent
    MALFORMED_RESPONSE = "malformed_response"  #: a missing row or label logprob
    WORKER_LOST = "worker_lost"  #: the lease expired without a result (the sweeper's record)
    DB_ERROR = "db_error"  #: the store failed
    POISON = "poison"  #: stopped at the attempt cap
    CANCELLED = "cancelled"  #: interrupted, or its run cancelled
    REJECTED = "rejected"  #: a permanent input problem (``InputError``)
    NOT_SERVED = "not_served"  #: the worker's upstream does not serve the run's model: not charged
    UNAUTHORIZED = "unauthorized"  #: the upstream refused the worker's API key: not charged
    #: a decision endpoint declined one question (one row per refused question, written with
    #: the attempt that won; the decision is done, that question unanswered)
    REFUSED = "refused"
    #: a decision endpoint kept answering 429/529 (rate limited) past the retry deadline
    THROTTLED = "throttled"
    #: the attempt failed after its run paused: back to pending, not charged
    PAUSED = "paused"
    #: an image of the decision did not answer when the worker fetched it (transient: retried
    #: up to the attempt cap, as a read that cannot reach the server is)
    IMAGE_UNREACHABLE = "image_unreachable"
    #: an image's bytes differ from the ones checked at submit (permanent: a decision is never
    #: answered about another picture than the one it was submitted with)
    IMAGE_CHANGED = "image_changed"
    #: not an attempt outcome: the kind of errors that never end an attempt (configuration)
    ERROR = "error"
    #: not an attempt outcome: the broker did not take a message (rows stay in SQL)
    PUBLISH_ERROR = "publish_error"

    @property
    def outcome_class(self) -> OutcomeClass:
        """The infrastructure's or the read's (``INFRASTRUCTURE_KINDS``)."""
        return outcome_class(self)


#: The outcomes of the infrastructure: every other ``OutcomeKind`` is the read's.
INFRASTRUCTURE_KINDS = frozenset({
    OutcomeKind.UPSTREAM_UNREACHABLE,  # the server is down or unreachable
    OutcomeKind.TIMEOUT,  # the server did not answer in time
    OutcomeKind.SERVER_ERROR,  # the server failed (5xx)
    OutcomeKind.THROTTLED,  # the endpoint kept rate limiting
    OutcomeKind.WORKER_LOST,  # a worker died or lost its lease
    OutcomeKind.DB_ERROR,  # the store failed
    OutcomeKind.CANCELLED,  # interrupted (Ctrl-C, a warm shutdown) or the run cancelled
    OutcomeKind.PAUSED,  # the run paused (breaker, budget): not charged
    OutcomeKind.NOT_SERVED,  # the worker's server does not serve the run's model
    OutcomeKind.UNAUTHORIZED,  # the worker's API key was refused
    OutcomeKind.IMAGE_UNREACHABLE,  # an image's host did not answer the worker
    OutcomeKind.ERROR,  # a configuration error
    OutcomeKind.PUBLISH_ERROR,  # the broker did not take a message
})

#: The read's outcomes: its answer, or a failure the decision itself would meet again.
READ_KINDS = frozenset({
    OutcomeKind.OK,  # answered
    OutcomeKind.BAD_REQUEST,  # the server refused this read (4xx): a prompt too long, ...
    OutcomeKind.MALFORMED_RESPONSE,  # a row or a label logprob missing from the answer
    OutcomeKind.REFUSED,  # a decision endpoint declined the question
    OutcomeKind.REJECTED,  # the input cannot be read (a bad line, a bad image)
    OutcomeKind.IMAGE_CHANGED,  # the image is not the one submitted
    OutcomeKind.POISON,  # still unanswered at the attempt cap
})


def outcome_class(kind: str) -> OutcomeClass:
    """The class of an outcome kind as stored (``attempts.outcome``, ``last_error_kind``): a
    kind this version does not know is the read's (counted where a user looks, not hidden)."""
    return (OutcomeClass.INFRASTRUCTURE if kind in INFRASTRUCTURE_KINDS
            else OutcomeClass.READ)


class DreadsError(Exception):
    """Base of every error dreads raises on purpose."""

    kind: OutcomeKind = OutcomeKind.ERROR
    #: What a command that ends with this error exits with.
    exit_code: int = EXIT_FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(DreadsError):
    """A problem in what the user gave: fix the input, retrying cannot help."""

    kind = OutcomeKind.REJECTED
    exit_code = EXIT_USAGE


class BadLine(InputError):
    """One line of a job file could not be read."""

    def __init__(self, message: str, *, line_no: int) -> None:
        super().__init__(f"line {line_no}: {message}")
        self.line_no = line_no
        self.reason = message


class ImageError(InputError):
    """An image of a decision cannot be used: the message names its reference and what to do
    (``app.images``). At submit, the decision is rejected; the other lines are kept."""


class ImageUnreachable(ImageError):
    """An image's URL did not answer (refused, timed out, or an HTTP error status). Rejects the
    decision at submit; when a worker fetches it again for a read, the attempt fails with kind
    ``image_unreachable`` and is retried (the URL may answer again)."""

    kind = OutcomeKind.IMAGE_UNREACHABLE

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ImageChanged(ImageError):
    """An image's bytes hash to another sha256 than the one stored at submit: the picture the
    decision was submitted with is gone. Permanent (kind ``image_changed``)."""

    kind = OutcomeKind.IMAGE_CHANGED


class TemplateError(InputError):
    """The answer template cannot be read (label not one token, slots differ, too wide)."""


class UpstreamError(DreadsError):
    """Talking to the model server failed."""


class UpstreamUnavailable(UpstreamError):
    """Transient: retry later. ``kind`` is upstream_unreachable, timeout or server_error."""

    def __init__(self, message: str, *,
                 kind: OutcomeKind | str = OutcomeKind.UPSTREAM_UNREACHABLE,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.kind = OutcomeKind(kind)
        self.status = status


class UpstreamRejected(UpstreamError):
    """Permanent: the server answered 4xx; the same request will always fail."""

    kind = OutcomeKind.BAD_REQUEST

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


class ModelNotServed(UpstreamRejected):
    """The server answered that the request's model does not exist there (vLLM's 404): the
    worker's upstream serves another model. Permanent for this worker, but not a fault of the
    decision: a worker re-queues it uncharged and stops taking that queue's work."""

    kind = OutcomeKind.NOT_SERVED
    exit_code = EXIT_USAGE  # --model names a model the server does not serve


class UpstreamUnauthorized(UpstreamRejected):
    """The server refused this client's credentials (401 or 403; vLLM's ``--api-key``). Never
    retried, and never a decision's failure: a worker puts the decision back uncharged and
    stops taking work, since every read would be refused the same way."""

    kind = OutcomeKind.UNAUTHORIZED
    exit_code = EXIT_USAGE  # the key is a setting

    @classmethod
    def answered(cls, status: int, detail: str) -> UpstreamUnauthorized:
        """The error for a 401/403 answer: what to set, whatever the server said."""
        return cls(f"the upstream refused this client's API key ({status}: {detail}): set "
                   "DREADS_UPSTREAM_API_KEY to the key vLLM was started with (--api-key)",
                   status=status)


class MalformedResponse(UpstreamError):
    """The server answered 200 but a row or a label logprob is missing."""

    kind = OutcomeKind.MALFORMED_RESPONSE


class StoreError(DreadsError):
    """The SQL store failed or is not in the state a command needs."""

    kind = OutcomeKind.DB_ERROR


class SchemaNotReady(StoreError):
    """The database schema is missing or behind the code."""

    exit_code = EXIT_USAGE  # `dreads db upgrade`


class StoreConflict(StoreError):
    """A write the database refused because of a concurrent one (a row it references deleted
    meanwhile, a deadlock, a serialization failure): the database works; try again."""


class BadDatabaseUrl(StoreError):
    """The database URL cannot be used as given: another database, not a URL, a SQLite file
    in a directory that does not exist."""

    exit_code = EXIT_USAGE


class SettingChange(Protocol):
    """One setting that differs (``app.engine.SettingChange``): its field name, the run's
    value and the one asked for."""

    @property
    def name(self) -> str: ...
    @property
    def old(self) -> Any: ...
    @property
    def new(self) -> Any: ...


def _by_field(change: SettingChange) -> str:
    return f"{change.name}: {change.old!r} -> {change.new!r}"


class RunSettingsMismatch(StoreError):
    """A run would continue under settings or a server other than the ones it started with.

    Made with ``changes`` (and no message), it carries the settings that differ by field name,
    so that each entry point words them as its user typed them (``worded``): ``run {run!r}
    {situation} ({changes}); {advice}``; ``message`` names the fields.
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str = "", *, run: str = "",
                 changes: Sequence[SettingChange] = (), situation: str = "",
                 advice: str = "") -> None:
        self.run = run
        self.changes = tuple(changes)
        self.situation = situation  #: "exists with other settings"
        self.advice = advice  #: what to do, after the changes
        super().__init__(message or self.worded(_by_field))

    def worded(self, describe: Callable[[SettingChange], str]) -> str:
        """The message with each change worded by ``describe`` (the message as made when the
        error carries no changes)."""
        if not self.changes:
            return str(self)
        return (f"run {self.run!r} {self.situation} "
                f"({'; '.join(map(describe, self.changes))}); {self.advice}")


class PublishError(DreadsError):
    """The broker did not take a message: the rows stay pending or queued for the sweeper."""

    kind = OutcomeKind.PUBLISH_ERROR


class RunCancelled(InputError):
    """A cancelled run was asked to go on: it never runs again (submit it under a new name)."""


class RunPaused(DreadsError):
    """The run paused while it ran (the breaker tripped, or it reached its budget): nothing
    more is charged to its decisions; ``dreads resume RUN`` goes on (with a higher
    ``--max-cost`` after a budget). Exits 1: the environment failed, not the input."""

    kind = OutcomeKind.PAUSED

    def __init__(self, message: str, *, budget: bool = False) -> None:
        super().__init__(message)
        self.budget = budget  #: paused by its budget (``PauseKind.BUDGET``)


class ConfigError(DreadsError):
    """A setting, or a combination of settings, is invalid."""

    kind = OutcomeKind.ERROR
    exit_code = EXIT_USAGE


class BudgetReached(ConfigError):
    """A paused run was asked to go on while its recorded cost is at or past its budget
    (``--max-cost``): it would pause again at once. A higher ``--max-cost`` goes on."""
