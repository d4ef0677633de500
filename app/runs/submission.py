"""One submission, the same for every entry point (``dreads submit``, ``dreads run``,
``POST /v1/runs``): look the run up, let the entry point resolve how it reads (its own way:
options and ``DREADS_*``, or the server's settings), build the request, stream the lines in,
and leave no empty run behind. The entry points keep only parsing their input and printing
or returning the report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine.limits import check_run_name
from app.images import ImagePolicy
from app.runs.submit import Publisher, SubmitReport, SubmitRequest, submit_job

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.engine import ReadSettings, ServerFingerprint, TextTokenizer
    from app.runs.jobfile import NumberedLine
    from app.store.records import RunInfo
    from app.store.types import SessionFactory

__all__ = ["Resolve", "Resolved", "Submission", "Submitted", "submit_run"]


@dataclass(frozen=True)
class Submission:
    """What the entry point was asked: the lines' file, the run and how to take them."""

    path: Path  #: the job file (an upload: its name, the lines are passed apart)
    run_name: str
    replicates: int | None = None  #: None: the run's own count (1 for a new run)
    strict: bool = False
    replace_changed: bool = False
    images: ImagePolicy = field(default_factory=ImagePolicy)
    prices: Mapping[str, float | None] = field(default_factory=dict)
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolved:
    """How the run reads, as the entry point resolved it for the run found (or a new one)."""

    settings: ReadSettings
    upstream: str  #: what the run records as its upstream
    engine: UpstreamConfig
    tokenizer: TextTokenizer
    fingerprint: ServerFingerprint | None = None
    fingerprint_error: str | None = None  #: why the server gave no fingerprint


@dataclass(frozen=True)
class Submitted:
    report: SubmitReport
    resolved: Resolved


#: The entry point's resolution: the run found (None: a new run) -> how it reads.
Resolve = Callable[["RunInfo | None"], Resolved]


def submit_run(factory: SessionFactory, submission: Submission, resolve: Resolve, *,
               lines: Iterable[NumberedLine] | None = None,
               publisher_for: Callable[[SubmitRequest], Publisher | None] | None = None,
               ) -> Submitted:
    """Submit ``submission``'s lines (``lines``, else its file) to its run, resolved by
    ``resolve``; ``publisher_for`` gives what queues them (None: written pending, for an
    executor in this process). A submission that stored no decision leaves no new run.

    Raises:
        RunSettingsMismatch: the run exists with other settings.
        InputError: a run name that cannot be stored (``check_run_name``), an unreadable
            file; ConfigError and UpstreamError as ``resolve`` raises.
    """
    from app.store.admin import discard_empty_run, may_be_empty
    from app.store.db import session_scope

    check_run_name(submission.run_name)
    existing = _existing_run(factory, submission.run_name)
    resolved = resolve(existing)
    request = _request(submission, resolved, existing)
    publisher = publisher_for(request) if publisher_for is not None else None
    report = submit_job(request, factory, resolved.tokenizer, lines=lines, publisher=publisher)
    if may_be_empty(report):  # a transaction only where a run may have been left empty
        with session_scope(factory) as session:
            discard_empty_run(session, report)
    return Submitted(report, resolved)


def _existing_run(factory: SessionFactory, name: str) -> RunInfo | None:
    from app.store.db import session_scope
    from app.store.runs import find_run

    with session_scope(factory) as session:
        return find_run(session, name)


def _request(submission: Submission, resolved: Resolved,
             existing: RunInfo | None) -> SubmitRequest:
    replicates = submission.replicates or (existing.replicates if existing else 1)
    return SubmitRequest(path=submission.path, run_name=submission.run_name,
                         settings=resolved.settings, upstream=resolved.upstream,
                         engine=resolved.engine.engine, replicates=replicates,
                         strict=submission.strict, fingerprint=resolved.fingerprint,
                         replace_changed=submission.replace_changed, images=submission.images,
                         prices=submission.prices, sources=submission.sources)
