"""``dreads submit``: validate a job file, write the run and its decisions, publish chunks.

Order matters (design.md, data flow 1): every row is committed before any message is
published, so a message never names a decision SQL does not have; a failed publish leaves the
rows ``pending`` for the sweeper or ``dreads resume``.

    lines --parse_job_lines--> ParsedJob (decisions + bad lines)
          --check_templates--> rejected decisions (a user input problem, stored as rejected)
          --submit_job-------> run + decisions in SQL, then publish_decisions()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings
from app.engine import (
    Decision,
    ReadSettings,
    ServerFingerprint,
    TextTokenizer,
    decision_payload,
    parse_decision,
    plan_decision,
    settings_from_dict,
    settings_hash,
    settings_to_dict,
)
from app.errors import (
    BadLine,
    DreadsError,
    InputError,
    RunSettingsMismatch,
    TemplateError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from app.jobfile import NumberedLine, read_job_file
from app.store.db import session_scope
from app.store.models import RunStatus
from app.store.queue import mark_queued
from app.store.runs import (
    DecisionRow,
    RunInfo,
    compare_fingerprint,
    compare_settings,
    ensure_run,
    insert_decisions,
    record_fingerprint,
    reset_failed,
)
from app.store.views import resume_preview

__all__ = [
    "LineProblem",
    "ParsedJob",
    "PublishOutcome",
    "Publisher",
    "ResumeReport",
    "SubmitReport",
    "SubmitRequest",
    "check_resume_settings",
    "check_server",
    "check_templates",
    "fetch_fingerprint",
    "fingerprint_dict",
    "parse_job_lines",
    "publish_decisions",
    "read_job_file",
    "resume_run",
    "submit_job",
    "upstream_config",
]

log = logging.getLogger("dreads.producer")

#: ``publisher(run_id, decision_ids) -> messages sent``; raises a DreadsError when the broker
#: does not take them (``app.publish.PublishError``).
Publisher = Callable[[int, Sequence[int]], int]
#: Decisions published, then stamped ``queued``, per transaction.
_PUBLISH_SLAB = 4096


@dataclass(frozen=True)
class LineProblem:
    """A line that was refused (bad) or a decision stored as rejected, with the reason."""

    line_no: int
    key: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line_no, "id": self.key, "reason": self.reason}


@dataclass
class ParsedJob:
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    bad: list[LineProblem] = field(default_factory=list)
    lines: int = 0


@dataclass(frozen=True)
class SubmitRequest:
    path: Path
    run_name: str
    settings: ReadSettings
    upstream: str
    engine: str = "vllm"
    replicates: int = 1
    strict: bool = False
    fingerprint: ServerFingerprint | None = None


@dataclass(frozen=True)
class PublishOutcome:
    published: int = 0  #: decisions whose message went out (and stamped queued)
    messages: int = 0
    error: str | None = None  #: why the rest stayed pending


@dataclass
class SubmitReport:
    run: RunInfo | None
    created: bool
    lines: int
    valid: int
    bad: list[LineProblem]
    rejected: list[LineProblem]
    inserted: int = 0
    already_present: int = 0
    refused: bool = False  #: --strict and problems: nothing written
    inserted_ids: list[int] = field(default_factory=list)
    publish: PublishOutcome = field(default_factory=PublishOutcome)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.name if self.run else None, "created": self.created,
            "lines": self.lines, "valid": self.valid, "inserted": self.inserted,
            "already_present": self.already_present, "refused": self.refused,
            "bad_lines": [p.as_dict() for p in self.bad],
            "rejected": [p.as_dict() for p in self.rejected],
            "published": self.publish.published, "messages": self.publish.messages,
            "publish_error": self.publish.error,
            "fingerprint": dict(self.run.fingerprint) if self.run and self.run.fingerprint
            else None,
        }


def parse_job_lines(lines: Iterable[NumberedLine]) -> ParsedJob:
    """Parse every line; bad ones (not JSON, not a decision, duplicate id) are collected."""
    job = ParsedJob()
    first_seen: dict[str, int] = {}
    for line_no, text in lines:
        job.lines += 1
        try:
            decision = _parse_line(line_no, text)
        except BadLine as exc:
            job.bad.append(LineProblem(line_no, None, exc.reason))
            continue
        if decision.id in first_seen:
            reason = f"duplicate id {decision.id!r} (first on line {first_seen[decision.id]})"
            job.bad.append(LineProblem(line_no, decision.id, reason))
            continue
        first_seen[decision.id] = line_no
        job.decisions.append((line_no, decision))
    return job


def _parse_line(line_no: int, text: str | BadLine) -> Decision:
    if isinstance(text, BadLine):  # not UTF-8 (app.jobfile.decode_lines)
        raise text
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON ({exc})", line_no=line_no) from exc
    if not isinstance(obj, dict):
        raise BadLine(f"a line must be a JSON object, got {type(obj).__name__}", line_no=line_no)
    try:
        return parse_decision(obj, line_no=line_no)
    except BadLine:
        raise
    except InputError as exc:
        raise BadLine(exc.message, line_no=line_no) from exc


def check_templates(
    decisions: Iterable[tuple[int, Decision]], settings: ReadSettings, tokenizer: TextTokenizer
) -> dict[str, LineProblem]:
    """Plan every decision with the run's tokenizer; decision id -> problem for those that
    cannot be read (multi-token label, template wider than the canvas, ...)."""
    problems: dict[str, LineProblem] = {}
    for line_no, decision in decisions:
        try:
            plan_decision(decision, settings, tokenizer)
        except TemplateError as exc:
            problems[decision.id] = LineProblem(line_no, decision.id, exc.message)
    return problems


def fingerprint_dict(fingerprint: ServerFingerprint | None) -> dict[str, Any] | None:
    if fingerprint is None:
        return None
    return {"engine": fingerprint.engine, "model_id": fingerprint.model_id,
            "max_model_len": fingerprint.max_model_len, "version": fingerprint.version,
            "canvas_length": fingerprint.canvas_length,
            "constrained": fingerprint.constrained}


def _rows(job: ParsedJob, rejected: dict[str, LineProblem],
          replicates: int) -> Iterator[DecisionRow]:
    for line_no, decision in job.decisions:
        problem = rejected.get(decision.id)
        payload = decision_payload(decision)
        for replicate in range(replicates):
            yield DecisionRow(key=decision.id, replicate=replicate, cell=decision.cell,
                              line_no=line_no, payload=payload,
                              n_questions=len(decision.questions),
                              rejected_reason=problem.reason if problem else None)


def submit_job(
    request: SubmitRequest,
    factory: sessionmaker[Session],
    tokenizer: TextTokenizer,
    *,
    lines: Iterable[NumberedLine] | None = None,
) -> SubmitReport:
    """Validate, then write the run and its decisions in one transaction (not published yet:
    call ``publish_decisions`` with ``report.inserted_ids``). Under ``strict`` any problem
    refuses the whole file and nothing is written."""
    job = parse_job_lines(lines if lines is not None else read_job_file(request.path))
    rejected = check_templates(job.decisions, request.settings, tokenizer)
    report = SubmitReport(run=None, created=False, lines=job.lines, valid=len(job.decisions),
                          bad=job.bad, rejected=sorted(rejected.values(),
                                                       key=lambda p: p.line_no))
    if request.strict and (job.bad or rejected):
        report.refused = True
        return report
    if not job.decisions:  # every line was bad: no run is created for nothing
        return report
    with session_scope(factory) as session:
        report.run, report.created = _ensure(session, request)
        inserted = insert_decisions(session, report.run.id, _rows(job, rejected,
                                                                   request.replicates))
    report.inserted = len(inserted)
    report.already_present = len(job.decisions) * request.replicates - report.inserted
    report.inserted_ids = sorted(rid for rid, row in inserted if row.rejected_reason is None)
    return report


def _ensure(session: Session, request: SubmitRequest) -> tuple[RunInfo, bool]:
    return ensure_run(
        session, name=request.run_name, settings=settings_to_dict(request.settings),
        settings_hash=settings_hash(request.settings), upstream=request.upstream,
        engine=request.engine, source=str(request.path), replicates=request.replicates,
        fingerprint=fingerprint_dict(request.fingerprint),
    )


def publish_decisions(
    factory: sessionmaker[Session], publisher: Publisher, run_id: int, ids: Sequence[int]
) -> PublishOutcome:
    """Publish chunk messages for ``ids`` slab by slab, stamping each slab ``queued`` once its
    messages went out. A broker failure stops there: the rest stay ``pending`` (the sweeper or
    ``dreads resume`` publishes them) and the outcome says why."""
    published = messages = 0
    for start in range(0, len(ids), _PUBLISH_SLAB):
        slab = ids[start:start + _PUBLISH_SLAB]
        try:
            messages += publisher(run_id, slab)
        except DreadsError as exc:
            log.warning("publish stopped: %s", exc.message)
            return PublishOutcome(published, messages, exc.message)
        with session_scope(factory) as session:
            mark_queued(session, slab)
        published += len(slab)
    return PublishOutcome(published, messages)


def upstream_config(url: str, settings: ReadSettings, *, max_in_flight: int | None = None,
                    engine: Any = None) -> Any:
    """The ``UpstreamConfig`` reading ``settings`` at ``url``. ``engine`` (an UpstreamConfig:
    engine, device, dtype, model_path) is the engine the user chose; default ``DREADS_*``."""
    from app.upstream.factory import UpstreamConfig

    env = get_settings()
    base = engine or UpstreamConfig(engine=env.engine, device=env.device, dtype=env.dtype)
    return replace(base, url=url, model=settings.model, canvas_length=settings.canvas_length,
                   max_in_flight=max_in_flight or env.max_in_flight,
                   timeout_s=env.read_timeout_s, retries=env.read_retries)


def fetch_fingerprint(
    url: str, settings: ReadSettings, *, timeout_s: float = 10.0, engine: Any = None
) -> tuple[ServerFingerprint | None, str | None]:
    """The upstream's fingerprint, or (None, why) when it cannot be reached now.

    Raises:
        UpstreamRejected: it answers but serves another model than ``settings.model``.
    """
    from app.upstream.factory import make_upstream

    async def _fetch() -> ServerFingerprint:
        upstream = make_upstream(upstream_config(url, settings, engine=engine))
        try:
            return await asyncio.wait_for(upstream.fingerprint(), timeout_s)
        finally:
            await upstream.aclose()

    try:
        return asyncio.run(_fetch()), None
    except UpstreamUnavailable as exc:
        return None, exc.message
    except TimeoutError:
        return None, f"no answer from {url} within {timeout_s:.0f}s"


@dataclass
class ResumeReport:
    """What ``dreads resume`` found and did."""

    run: str
    dry_run: bool
    before: dict[str, int]  #: expired leases, failed, pending, stale queued (resume_preview)
    retried: int = 0
    sweep: Any = None  #: app.sweeper.SweepReport
    server_note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        sweep = self.sweep.as_dict() if self.sweep is not None else None
        return {"run": self.run, "dry_run": self.dry_run, "before": self.before,
                "retried_failed": self.retried, "sweep": sweep, "server": self.server_note}

    def lines(self) -> list[str]:
        b = self.before
        found = (f"run {self.run!r}: {b['pending']} pending, {b['stale_queued']} queued without "
                 f"a live message, {b['expired_leases']} expired lease(s), {b['failed']} failed")
        out = [found] + ([self.server_note] if self.server_note else [])
        if self.dry_run:
            return [*out, "dry run: nothing changed"]
        if self.retried:
            out.append(f"{self.retried} failed decision(s) put back to pending")
        s = self.sweep
        if s is not None:
            out.append(f"swept: {s.lost} lost lease(s) back to pending, {s.poisoned} stopped at "
                       f"the attempt cap; published {s.published} decision(s) in {s.messages} "
                       "message(s)")
            if s.error:
                out.append(f"publish stopped: {s.error}")
        return out


def check_resume_settings(run: RunInfo, given: Mapping[str, Any]) -> ReadSettings:
    """The run's settings; refuses a cancelled run or options that differ from them."""
    if run.status == RunStatus.CANCELLED:
        raise InputError(f"run {run.name!r} was cancelled; submit its file under a new --run "
                         "name to run it again")
    current = settings_from_dict(dict(run.settings))
    diffs = compare_settings(settings_to_dict(current),
                             settings_to_dict(replace(current, **given)))
    if diffs:
        raise RunSettingsMismatch(
            f"run {run.name!r} was created with other settings ({'; '.join(diffs)}); a run "
            "continues only under its own settings: drop these options, or submit the file "
            "under a new --run name")
    return current


def check_server(factory: sessionmaker[Session], run: RunInfo, url: str,
                 settings: ReadSettings, *, force: bool, engine: Any = None,
                 dry_run: bool = False) -> str | None:
    """Refuse a server whose model or canvas differs from the run's (unless ``force``);
    record the fingerprint when the run has none yet (``dry_run``: only say it would).
    Returns a note for the user."""
    old = dict(run.fingerprint or {})
    try:
        fingerprint, why = fetch_fingerprint(url, settings, engine=engine)
    except UpstreamRejected as exc:  # it serves another model than the run's
        if not force:
            raise RunSettingsMismatch(
                f"run {run.name!r} started against model {old.get('model_id', settings.model)!r}"
                f" but {exc.message}; point --upstream at the original server, or pass --force "
                "to continue anyway") from exc
        return f"--force: continuing although {exc.message}"
    if fingerprint is None:
        return f"upstream not reached ({why}): server fingerprint not checked"
    diffs = compare_fingerprint(run.fingerprint, fingerprint)
    if diffs and not force:
        raise RunSettingsMismatch(
            f"run {run.name!r} started against another server ({'; '.join(diffs)}); answers "
            "would mix two models or canvases. Point --upstream at the original server, or "
            "pass --force to continue anyway")
    if run.fingerprint is None and dry_run:
        return f"server fingerprint would be recorded: {fingerprint.model_id}"
    if run.fingerprint is None:
        with session_scope(factory) as session:
            record_fingerprint(session, run.id, fingerprint_dict(fingerprint) or {})
        return f"server fingerprint recorded: {fingerprint.model_id}"
    if diffs:
        return f"--force: continuing against a different server ({'; '.join(diffs)})"
    return None


def resume_run(factory: sessionmaker[Session], run: RunInfo, *, sweep: Callable[[], Any],
               retry_failed: bool, dry_run: bool, requeue_after_s: float) -> ResumeReport:
    """Sweep the run once (expired leases back to pending, then publish every pending and
    stale queued decision), after putting failed ones back with ``retry_failed``.
    Idempotent: a finished run publishes nothing."""
    with session_scope(factory) as session:
        before = resume_preview(session, run.id, requeue_after_s=requeue_after_s)
    report = ResumeReport(run=run.name, dry_run=dry_run, before=before)
    if dry_run:
        return report
    if retry_failed:
        with session_scope(factory) as session:
            report.retried = reset_failed(session, run.id)
    report.sweep = sweep()
    return report
