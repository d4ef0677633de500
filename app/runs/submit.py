"""``dreads submit``: validate a job file, write the run and its decisions, publish chunks.

The file is streamed: it is read, validated and written in batches, each committed on its
own, so memory stays flat in the file's size and, with a publisher, the workers start on the
first batch while the rest is still loading.

Order matters (the publishing protocol of docs/internals.md): a batch's readable rows are
inserted already ``queued`` and committed before any of their messages is published, so a
message never names a decision SQL does not have, and a worker never finds a message whose
rows are still being stamped (a claim skips locked rows). A failed publish puts the
unpublished rows back to ``pending`` (the sweeper or ``dreads resume`` publishes them) and
later batches are written ``pending``; a submit that dies between a commit and its publish
leaves ``queued`` rows without a message, which the sweeper re-publishes once the run's queue
is drained (``DREADS_REQUEUE_AFTER_S``).

    lines --iter_job_lines--> decisions and bad lines, one at a time
          --SubmitImages-----> each image fetched and checked once: its record (ref, sha256,
                               size) stored with the decision, or the decision rejected
          --check_templates--> rejected decisions (a user input problem, stored as rejected)
          --submit_job-------> run + decisions in SQL batch by batch, each batch published
"""

from __future__ import annotations

import logging
import queue
import threading
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from app.engine import (
    Decision,
    ReadSettings,
    ServerFingerprint,
    SpecsMemo,
    TextTokenizer,
    content_digest,
    decision_payload,
    plan_decision,
    plans_reads,
    settings_hash,
    settings_to_dict,
)
from app.errors import DreadsError, TemplateError
from app.images import ImagePolicy
from app.runs.changed import sort_skipped
from app.runs.jobfile import (
    LineProblem,
    NumberedLine,
    ParsedJob,
    bounded_memo,
    iter_job_lines,
    read_job_file,
    split_lines,
)
from app.runs.probe import fingerprint_dict
from app.runs.refusals import refuse_cancelled
from app.runs.submit_images import BatchImages, SubmitImages
from app.runs.unpublish import unpublish
from app.store.bulk import LaidOut, lay_out, write_laid_out
from app.store.db import session_scope
from app.store.models import DecisionStatus
from app.store.queue import database_now
from app.store.runs import DecisionRow, RunInfo, ensure_run, insert_decisions
from app.store.sources import record_sources
from app.store.spend import set_prices
from app.store.types import Session, SessionFactory
from app.tokenizer.limits import too_long_for

__all__ = ["PublishOutcome", "Publisher", "SubmitReport", "SubmitRequest", "check_templates",
           "submit_job"]

log = logging.getLogger("dreads.submit")

#: Decisions validated, written and committed together (then published while the next
#: batch is written).
SUBMIT_BATCH = 5000
#: The first batch of a submission is SUBMIT_BATCH / this; each next one doubles.
_FIRST_BATCH_SHARE = 16
#: Batches written but not yet published, at most (bounds memory when the broker is slow).
_PUBLISH_BACKLOG = 4
#: Batches parsed but not yet written, at most (bounds memory when the database is slow).
_WRITE_BACKLOG = 2


class Publisher(Protocol):
    """Sends a run's chunk messages (``app.broker.publish.RunPublisher``)."""

    def start(self, now_s: float) -> None:
        """Called once before the first publish, with the database clock (epoch seconds)."""

    def __call__(self, run_id: int, decision_ids: Sequence[int]) -> int:
        """Publish ``decision_ids``; the number of messages. Raises a DreadsError
        (``PublishError``) when the broker does not take them."""


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
    #: a changed line under an id the run holds replaces the stored decision if not started
    replace_changed: bool = False
    #: what the decisions' images may be fetched from, and how large they may be
    images: ImagePolicy = field(default_factory=ImagePolicy)
    #: token prices and budget recorded with the run (``app.store.spend.PRICE_COLUMNS``;
    #: None: not given)
    prices: Mapping[str, float | None] = field(default_factory=dict)
    #: the files read, as resolved absolute paths (``app.runs.sources.recorded_path``),
    #: recorded with the run; an upload over the API reads none
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishOutcome:
    published: int = 0  #: decisions whose message went out
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
    readable: int = 0  #: inserted and not rejected: the decisions to run
    publish: PublishOutcome = field(default_factory=PublishOutcome)
    #: lines changed under an id the run holds, whose stored decision is kept
    changed: list[LineProblem] = field(default_factory=list)
    replaced: int = 0  #: changed lines whose decision took the new content (--replace-changed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.name if self.run else None, "created": self.created,
            "lines": self.lines, "valid": self.valid, "inserted": self.inserted,
            "already_present": self.already_present, "refused": self.refused,
            "bad_lines": [p.as_dict() for p in self.bad],
            "rejected": [p.as_dict() for p in self.rejected],
            "changed": [p.as_dict() for p in self.changed], "replaced": self.replaced,
            "published": self.publish.published, "messages": self.publish.messages,
            "publish_error": self.publish.error,
            "fingerprint": dict(self.run.fingerprint) if self.run and self.run.fingerprint
            else None,
        }


def check_templates(
    decisions: Iterable[tuple[int, Decision]], settings: ReadSettings, tokenizer: TextTokenizer,
    *, cache: dict[Any, str | None] | None = None,
) -> dict[str, LineProblem]:
    """Plan every decision with the run's tokenizer; decision id -> problem for those that
    cannot be read (multi-token label, template wider than the canvas, ...). A plan depends
    on the questions and the settings only, so ``cache`` (questions -> problem) plans each
    distinct question set once."""
    problems: dict[str, LineProblem] = {}
    if not plans_reads(settings.answer_by):  # a decision endpoint plans its own reads
        return problems
    memo: dict[Any, str | None] = {} if cache is None else bounded_memo(cache)
    for line_no, decision in decisions:
        key = decision.questions  # frozen values: equal questions, equal plan
        if key not in memo:  # the template does not depend on the images
            memo[key] = _template_problem(replace(decision, images=()), settings, tokenizer)
        reason = memo[key]
        if reason is not None:
            problems[decision.id] = LineProblem(line_no, decision.id, reason)
    return problems


def _template_problem(decision: Decision, settings: ReadSettings,
                      tokenizer: TextTokenizer) -> str | None:
    try:
        plan_decision(decision, settings, tokenizer)
    except TemplateError as exc:
        return exc.message
    return None


def _rows(decisions: Sequence[tuple[int, Decision]], rejected: Mapping[str, LineProblem],
          replicates: int, specs: SpecsMemo, images: BatchImages) -> Iterator[DecisionRow]:
    memo = bounded_memo(specs)
    records = images.records
    for line_no, decision in decisions:
        problem = rejected.get(decision.id) if rejected else None
        payload = decision_payload(decision, memo=memo,
                                   images=records.get(decision.id) if records else None)
        reason = problem.reason if problem else None
        digest = content_digest(decision.cell, payload)
        for replicate in range(replicates):
            # positional: a million of these
            yield DecisionRow(decision.id, replicate, decision.cell, line_no, payload,
                              len(decision.questions), reason, digest)


class _Refused(Exception):
    """--strict met a problem: roll the whole submission back."""


def _batches(lines: Iterable[NumberedLine], size: int) -> Iterator[ParsedJob]:
    """The parsed lines, ``size`` at a time (repeated ids within a batch are bad lines here;
    across batches the database finds them). The first batches are smaller (``size`` / 16,
    then doubling), so the workers start on a large file at once rather than after its
    first ``size`` lines."""
    items = iter_job_lines(lines)
    step = max(1, size // _FIRST_BATCH_SHARE)
    while chunk := list(islice(items, step)):
        yield split_lines(chunk)
        step = min(size, step * 2)


@dataclass(frozen=True)
class _Prepared:
    """A parsed batch ready to be written: its template problems, rows and their status, and
    (a run new to this submission, on PostgreSQL) its rows laid out for COPY."""

    batch: ParsedJob
    rejected: dict[str, LineProblem]
    rows: list[DecisionRow]
    status: str
    laid_out: LaidOut | None


class _Writer:
    """Writes the batches of one submission and hands their readable ids to the publisher."""

    def __init__(self, request: SubmitRequest, factory: SessionFactory,
                 tokenizer: TextTokenizer, report: SubmitReport,
                 publishing: _PublishThread | None, *, queue_rows: bool) -> None:
        self.request = request
        self.queue_rows = queue_rows
        self.factory = factory
        self.tokenizer = tokenizer
        self.report = report
        self.publishing = publishing
        self.first_id: int | None = None  #: lowest id this submission inserted
        self.templates: dict[Any, str | None] = {}
        self.specs: SpecsMemo = {}
        self.images = SubmitImages(request.images)
        self.ids = array("q")  #: --strict: the readable ids, published after the commit

    def refuse_long_states(self, batch: ParsedJob) -> ParsedJob:
        """``batch`` with the lines whose state is longer than the model can read moved to
        its bad lines, told from their length before anything tokenizes them."""
        fingerprint = self.request.fingerprint
        context = fingerprint.max_model_len if fingerprint else None
        kept: list[tuple[int, Decision]] = []
        bad = list(batch.bad)
        for line_no, decision in batch.decisions:
            reason = too_long_for(decision, self.tokenizer, context)
            if reason is None:
                kept.append((line_no, decision))
            else:
                bad.append(LineProblem(line_no, decision.id, reason))
        if len(kept) == len(batch.decisions):
            return batch
        return ParsedJob(kept, sorted(bad, key=lambda p: p.line_no), batch.lines)

    def prepare(self, batch: ParsedJob) -> _Prepared:
        """Plan, lay out and (for a run this submission created, on PostgreSQL) draw the ids
        of one parsed batch: the parsing thread's share of the work."""
        run = self.report.run
        assert run is not None
        batch = self.refuse_long_states(batch)
        rejected, images = self.problems(batch)
        status = DecisionStatus.QUEUED if self._queue_now() else DecisionStatus.PENDING
        rows = list(_rows(batch.decisions, rejected, self.request.replicates, self.specs,
                          images))
        laid_out = None
        if self.report.created:
            with session_scope(self.factory, what="submit") as session:
                laid_out = lay_out(session, run.id, rows, status)
        return _Prepared(batch, rejected, rows, status, laid_out)

    def problems(self, batch: ParsedJob) -> tuple[dict[str, LineProblem], BatchImages]:
        """The batch's rejected decisions (an image that cannot be used, then a template that
        cannot be read) and its image records."""
        images = self.images.check(batch.decisions, self.request.settings)
        rest = [(n, d) for n, d in batch.decisions if d.id not in images.rejected]
        rejected = check_templates(rest, self.request.settings, self.tokenizer,
                                   cache=self.templates)
        rejected.update(images.rejected)
        return rejected, images

    def write(self, session: Session, prepared: _Prepared) -> list[int]:
        """Write one prepared batch in ``session``; return the ids to publish once it
        commits."""
        report, run = self.report, self.report.run
        assert run is not None
        batch, rejected, rows, status = (prepared.batch, prepared.rejected, prepared.rows,
                                         prepared.status)
        report.lines += batch.lines
        report.rejected += sorted(rejected.values(), key=lambda p: p.line_no)
        if prepared.laid_out is not None:
            inserted = write_laid_out(session, prepared.laid_out)
        else:
            inserted = insert_decisions(session, run.id, rows, batch_size=len(rows) or 1,
                                        status=status)
        if inserted:
            low = min(rid for rid, _ in inserted)
            self.first_id = low if self.first_id is None else min(self.first_id, low)
        won = {row.key for _, row in inserted}
        skipped = sort_skipped(session, run.id, {d.id: n for n, d in batch.decisions
                                                 if d.id not in won},
                               rows, first_id=self.first_id,
                               replace=self.request.replace_changed)
        report.bad += sorted(batch.bad + skipped.duplicates, key=lambda p: p.line_no)
        report.changed += sorted(skipped.changed, key=lambda p: p.line_no)
        report.replaced += len(skipped.replaced)
        report.valid += len(batch.decisions) - len(skipped.duplicates)
        report.inserted += len(inserted)
        report.already_present += (len(rows) - len(inserted)
                                   - skipped.not_already_there * self.request.replicates)
        readable = sorted(rid for rid, row in inserted if row.rejected_reason is None)
        report.readable += len(readable)
        if self.request.strict and (batch.bad or skipped.duplicates or skipped.changed
                                    or rejected):
            raise _Refused
        return readable if status == DecisionStatus.QUEUED else []

    def _queue_now(self) -> bool:
        """Rows are written queued while their messages are to be published right after."""
        return self.queue_rows and (self.publishing is None or self.publishing.error is None)

    def hand_over(self, ids: list[int]) -> None:
        """After the batch's commit (never before: a worker must find its rows queued)."""
        if self.request.strict:
            self.ids.extend(ids)  # published once the single transaction commits
        elif self.publishing is not None and ids:
            self.publishing.put(ids)


def submit_job(
    request: SubmitRequest,
    factory: SessionFactory,
    tokenizer: TextTokenizer,
    *,
    lines: Iterable[NumberedLine] | None = None,
    publisher: Publisher | None = None,
) -> SubmitReport:
    """Validate and write the run and its decisions batch by batch, each batch committed and
    (with ``publisher``) published while the next one is written. Without a publisher the
    rows are written ``pending`` (the embedded executor, or the sweeper, runs them). Under
    ``strict`` everything is one transaction, published after it commits, and any problem
    refuses the whole file: nothing is written."""
    source = lines if lines is not None else read_job_file(request.path)
    report = SubmitReport(run=None, created=False, lines=0, valid=0, bad=[], rejected=[])
    if request.strict:
        writer = _Writer(request, factory, tokenizer, report, None,
                         queue_rows=publisher is not None)
        try:
            now_s = _write_strict(writer, source)
        finally:
            writer.images.close()
        if writer.ids and publisher is not None:
            report.publish = _publish_all(factory, publisher, report, writer.ids, now_s)
        return report
    with session_scope(factory, what="submit") as session:
        report.run, report.created = _ensure(session, request)
        now_s = database_now(session).timestamp()
    publishing = _start_publishing(factory, publisher, report.run, now_s)
    writer = _Writer(request, factory, tokenizer, report, publishing,
                     queue_rows=publisher is not None)
    try:
        with _WriteThread(writer) as writing:
            for batch in _batches(source, SUBMIT_BATCH):
                writing.put(writer.prepare(batch))
    finally:
        writer.images.close()
        if publishing is not None:
            report.publish = publishing.close()
    return report


def _write_strict(writer: _Writer, source: Iterable[NumberedLine]) -> float:
    """The run and every batch in one transaction, rolled back (nothing written, not even a
    new run) at the first problem; the rest of the file is still read for the report.
    Returns the database clock (epoch seconds) at the start."""
    report = writer.report
    now_s = 0.0
    try:
        with session_scope(writer.factory, what="submit") as session:
            report.run, report.created = _ensure(session, writer.request)
            now_s = database_now(session).timestamp()
            for batch in _batches(source, SUBMIT_BATCH):
                writer.hand_over(writer.write(session, writer.prepare(batch)))
    except _Refused:
        _count_rest(writer, source)
        report.refused, report.run, report.created = True, None, False
        report.inserted = report.readable = report.already_present = 0
        writer.ids = array("q")
    return now_s


def _count_rest(writer: _Writer, source: Iterable[NumberedLine]) -> None:
    """After a --strict refusal, read the rest of the file for its problems (nothing written)."""
    report = writer.report
    for parsed in _batches(source, SUBMIT_BATCH):
        batch = writer.refuse_long_states(parsed)
        report.lines += batch.lines
        report.bad += batch.bad
        report.valid += len(batch.decisions)
        rejected, _ = writer.problems(batch)
        report.rejected += sorted(rejected.values(), key=lambda p: p.line_no)


def _ensure(session: Session, request: SubmitRequest) -> tuple[RunInfo, bool]:
    """The run (created if new) with the request's prices and files recorded.

    Raises:
        RunCancelled: the run was cancelled (nothing is stored: the caller's transaction
            rolls back).
        RunSettingsMismatch: the run exists with other settings.
    """
    run, created = ensure_run(
        session, name=request.run_name, settings=settings_to_dict(request.settings),
        settings_hash=settings_hash(request.settings), upstream=request.upstream,
        engine=request.engine, source=str(request.path), replicates=request.replicates,
        fingerprint=fingerprint_dict(request.fingerprint),
    )
    refuse_cancelled(run)
    set_prices(session, run.id, request.prices)
    record_sources(session, run.id, request.sources)
    return run, created


def _start_publishing(factory: SessionFactory, publisher: Publisher | None,
                      run: RunInfo, now_s: float) -> _PublishThread | None:
    """The publishing thread of a streaming submission (None without a publisher). A broker
    that cannot be reached now makes every row ``pending``, with the reason in the report."""
    if publisher is None:
        return None
    publishing = _PublishThread(factory, publisher, run.id)
    try:
        publisher.start(now_s)
    except DreadsError as exc:
        publishing.fail(exc.message)
        return publishing
    publishing.start()
    return publishing


def _publish_all(factory: SessionFactory, publisher: Publisher, report: SubmitReport,
                 ids: Sequence[int], now_s: float) -> PublishOutcome:
    """--strict: publish the committed rows slab by slab (they are queued already)."""
    assert report.run is not None
    publishing = _PublishThread(factory, publisher, report.run.id)
    try:
        publisher.start(now_s)
    except DreadsError as exc:
        publishing.fail(exc.message)
    for start in range(0, len(ids), SUBMIT_BATCH):
        publishing.publish(list(ids[start:start + SUBMIT_BATCH]))
    return publishing.outcome()


class _WriteThread(threading.Thread):
    """Writes each prepared batch in a transaction of its own while the next one is parsed
    and prepared, so the database's work on a batch overlaps the parsing of the next (this
    thread mostly waits on the server, without the interpreter lock). The first error ends
    the writing; ``put`` and the end of the ``with`` block raise it in the parsing thread,
    and what was committed before it stays. A block left by an error of its own skips the
    batches not started yet."""

    def __init__(self, writer: _Writer) -> None:
        super().__init__(name="dreads-submit-write", daemon=True)
        self.writer = writer
        self.inbox: queue.Queue[_Prepared | None] = queue.Queue(maxsize=_WRITE_BACKLOG)
        self.error: BaseException | None = None
        self.aborted = False

    def put(self, batch: _Prepared) -> None:
        self._raise_error()
        self.inbox.put(batch)

    def run(self) -> None:
        while (batch := self.inbox.get()) is not None:
            if self.error is not None or self.aborted:
                continue  # drain: the parsing thread stops at its next put
            try:
                with session_scope(self.writer.factory, what="submit") as session:
                    ids = self.writer.write(session, batch)
                self.writer.hand_over(ids)
            except BaseException as exc:
                self.error = exc

    def __enter__(self) -> _WriteThread:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Wait for the batches handed over (those not started are skipped when the block
        ended with an error), then raise the writing's error, if any."""
        self.aborted = exc_type is not None
        self.inbox.put(None)
        self.join()
        if not self.aborted:
            self._raise_error()

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error


class _PublishThread(threading.Thread):
    """Publishes committed batches while the next ones are written. After a broker failure
    it puts every id it is given back to ``pending`` (the sweeper publishes them)."""

    def __init__(self, factory: SessionFactory, publisher: Publisher,
                 run_id: int) -> None:
        super().__init__(name="dreads-submit-publish", daemon=True)
        self.factory = factory
        self.publisher = publisher
        self.run_id = run_id
        self.inbox: queue.Queue[list[int] | None] = queue.Queue(maxsize=_PUBLISH_BACKLOG)
        self.published = self.messages = 0
        self.error: str | None = None

    def put(self, ids: list[int]) -> None:
        self.inbox.put(ids)

    def run(self) -> None:
        while (ids := self.inbox.get()) is not None:
            self.publish(ids)

    def publish(self, ids: list[int]) -> None:
        if self.error is None:
            try:
                self.messages += self.publisher(self.run_id, ids)
                self.published += len(ids)
                return
            except DreadsError as exc:
                log.warning("publish stopped: %s", exc.message)
                self.fail(exc.message)
        unpublish(self.factory, ids)

    def fail(self, message: str) -> None:
        self.error = self.error or message

    def close(self) -> PublishOutcome:
        if self.is_alive():
            self.inbox.put(None)
            self.join()
        return self.outcome()

    def outcome(self) -> PublishOutcome:
        return PublishOutcome(self.published, self.messages, self.error)
