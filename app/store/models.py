"""SQLAlchemy 2 models. The schema is created and changed only through Alembic (``migrations/``).

runs 1--* run_sources (the files the CLI submitted it from)
runs 1--* decisions 1--* attempts 1--* draws
                    1--* answers (one per decision question; UNIQUE)
                    1--1 decision_payloads (what was asked: written at submit, replaced only
                         by ``submit --replace-changed`` while the decision is not started)

Failure counts are derived from the append-only ``attempts`` table, never from counters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.errors import OutcomeKind  # the attempt outcome kinds live with the error tree
from app.store.records import DecisionStatus, RunStatus
from app.store.states import NOT_STARTED, shown_status

__all__ = [
    "NOT_STARTED",
    "OPEN_PREDICATE",
    "Answer",
    "Attempt",
    "Base",
    "Decision",
    "DecisionPayload",
    "DecisionStatus",
    "Draw",
    "OutcomeKind",
    "Run",
    "RunPause",
    "RunSource",
    "RunSpend",
    "RunStatus",
    "shown_status",
]

#: The statuses of ``ix_decisions_open`` (what is not settled yet, and failed for --retry-failed).
OPEN_PREDICATE = "status IN ('pending', 'queued', 'leased', 'failed')"

# BigInteger ids that still autoincrement on SQLite.
BigId = BigInteger().with_variant(Integer, "sqlite")
#: An identifier compared only for equality (unique indexes): byte by byte on PostgreSQL
#: (``COLLATE "C"``, migration 0005), as SQLite compares already.
Identifier = String(500).with_variant(String(500, collation="C"), "postgresql")


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.ACTIVE)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)  #: ReadSettings as a dict
    settings_hash: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    upstream: Mapped[str] = mapped_column(String(500))
    engine: Mapped[str] = mapped_column(String(32), default="vllm")
    source: Mapped[str | None] = mapped_column(Text, nullable=True)  #: the submitted file
    replicates: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    #: while paused (``status`` paused): what paused it (``PauseKind``), why, and when
    pause_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pause_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    paused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: the breaker counts only attempts with a greater id (set by ``resume`` of a paused run)
    breaker_after: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: when a paused run's server was last probed (the breaker's half-open read; one prober
    #: per run takes it with a guarded UPDATE)
    probed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: what the run's tokens cost, dollars per million (None: not priced); changed by resume
    price_input_per_mtok: Mapped[float | None] = mapped_column(Float, nullable=True)
    price_output_per_mtok: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: the run pauses (pause kind ``budget``) once its recorded cost reaches this (dollars)
    max_cost: Mapped[float | None] = mapped_column(Float, nullable=True)


class RunSource(Base):
    """A file a run was submitted from (``dreads submit``, ``dreads run``), as its resolved
    absolute path: commands that write a user's file refuse to write over it."""

    __tablename__ = "run_sources"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    path: Mapped[str] = mapped_column(Text, primary_key=True)


class RunPause(Base):
    """One pause of a run, kept after it goes on: what paused it (``PauseKind``), why, when,
    and when it went on (None: still paused, or the run was cancelled while paused).
    ``runs.pause_*`` say only the current pause; the
    infrastructure section of status and report counts these (``app.store.infrastructure``)."""

    __tablename__ = "run_pauses"
    __table_args__ = (Index("ix_run_pauses_run", "run_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))  #: PauseKind
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    paused_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    resumed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RunSpend(Base):
    """What a run spent, per cell (``""``: decisions without one): added to by every commit
    of finished decisions, in its transaction (``app.store.spend``), never per decision."""

    __tablename__ = "run_spend"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    cell: Mapped[str] = mapped_column(String(200), primary_key=True)
    decisions: Mapped[int] = mapped_column(BigInteger, default=0)  #: finished attempts
    reads: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    #: dollars at the prices in force when each part was recorded; None: nothing was priced
    cost: Mapped[float | None] = mapped_column(Float, nullable=True)


class Decision(Base):
    __tablename__ = "decisions"
    __table_args__ = (
        UniqueConstraint("run_id", "key", "replicate", name="uq_decision_key"),
        # Only unsettled rows are indexed by status: a decision that is done (or cancelled,
        # rejected) adds no entry here, and the sweeper's and resume's queries (pending,
        # queued, leased, failed of a run, in id order) are range scans of this index.
        # The predicate (WHERE OPEN_PREDICATE) is created by migration 0002 and recorded in
        # ``info``: given here as ``postgresql_where``, it made every import of the models
        # load SQLAlchemy's whole PostgreSQL dialect package (asyncpg, pg8000, ...), 60-90 ms
        # of every command's start-up, on SQLite too.
        Index("ix_decisions_open", "status", "run_id", "id", info={"where": OPEN_PREDICATE}),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(Identifier)  #: the user's decision id
    replicate: Mapped[int] = mapped_column(Integer, default=0)  #: noise-seed replicate index
    cell: Mapped[str | None] = mapped_column(String(200), nullable=True)
    line_no: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_questions: Mapped[int] = mapped_column(Integer, default=1)
    #: what the decision asks (cell and payload), hashed: a line under the same id is compared
    #: with it at submit (None: written before migration 0006; computed from the payload then)
    content_hash: Mapped[str | None] = mapped_column(String(32), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=DecisionStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  #: claims so far
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_error_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class DecisionPayload(Base):
    """What a decision asks, ``{"state", "questions", "expected"}``: written once at submit.

    It lives apart from ``decisions`` because a decision row is rewritten as it is queued,
    claimed and finished: PostgreSQL writes a whole new row version each time, and the state
    text (most of a row) would be copied into every one of them.
    """

    __tablename__ = "decision_payloads"

    #: The decision's id. No foreign key (a lookup of the decision per row written, a
    #: quarter of a bulk submit's database work): the row is written with its decision, in the
    #: same transaction, and deleted with its run (``app.store.admin.delete_run``).
    decision_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)


class Attempt(Base):
    """Append-only: one row per attempt at a decision, with its outcome kind."""

    __tablename__ = "attempts"
    __table_args__ = (Index("ix_attempts_decision", "decision_id"),
                      Index("ix_attempts_run_outcome", "run_id", "outcome"),
                      # the breaker's look at a run's most recent attempts (migration 0007)
                      Index("ix_attempts_run_id", "run_id", "id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    decision_id: Mapped[int] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    outcome: Mapped[str] = mapped_column(String(32))  #: OutcomeKind
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    task_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    redelivered: Mapped[bool] = mapped_column(Boolean, default=False)
    lease_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    n_reads: Mapped[int] = mapped_column(Integer, default=0)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    won: Mapped[bool] = mapped_column(Boolean, default=False)  #: its answers are the ones kept
    #: a decision endpoint's usage object for this attempt's one request, as it came (None for
    #: dreads' reads: their tokens are per draw)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True),
                                                         nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Draw(Base):
    """The raw material of one question in one noise draw."""

    __tablename__ = "draws"
    __table_args__ = (Index("ix_draws_decision", "decision_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    decision_id: Mapped[int] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    question_id: Mapped[str] = mapped_column(String(500))
    unit: Mapped[int] = mapped_column(Integer)
    draw: Mapped[int] = mapped_column(Integer)
    #: None where the answer source draws its own noise (a decision endpoint)
    seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: The labels' logprobs (label order); the per-draw probabilities are their softmax
    #: (``app.engine.fold.softmax``), recomputed rather than stored twice. None (with the
    #: argmax, and the label mass where it says none) for a decision endpoint's draw: its
    #: probabilities are the answer's ``probs``.
    label_logprobs: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True),
                                                             nullable=True)
    argmax_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    argmax_is_label: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    label_mass: Mapped[float | None] = mapped_column(Float, nullable=True)
    entropy: Mapped[float] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cached_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Answer(Base):
    """One per decision question; the first finished attempt wins (UNIQUE)."""

    __tablename__ = "answers"
    __table_args__ = (
        UniqueConstraint("decision_id", "question_id", name="uq_answer_question"),
        Index("ix_answers_run", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    decision_id: Mapped[int] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"), nullable=True)
    question_id: Mapped[str] = mapped_column(Identifier)
    question_type: Mapped[str] = mapped_column(String(16))
    label: Mapped[str] = mapped_column(String(8))
    option: Mapped[str] = mapped_column(Text)
    probs: Mapped[dict[str, Any]] = mapped_column(JSON)
    p_yes: Mapped[float | None] = mapped_column(Float, nullable=True)
    expected_level: Mapped[float | None] = mapped_column(Float, nullable=True)
    confidence: Mapped[float] = mapped_column(Float)
    top_prob: Mapped[float] = mapped_column(Float)
    stderr: Mapped[float | None] = mapped_column(Float, nullable=True)
    agreement: Mapped[float | None] = mapped_column(Float, nullable=True)
    draws: Mapped[int] = mapped_column(Integer)
    stop_reason: Mapped[str] = mapped_column(String(16))
    #: None: the answer source does not report it (a decision endpoint), never 0
    label_mass: Mapped[float | None] = mapped_column(Float, nullable=True)
    min_label_mass: Mapped[float | None] = mapped_column(Float, nullable=True)
    argmax_is_label: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    entropy: Mapped[float] = mapped_column(Float)
    expected: Mapped[str | None] = mapped_column(Text, nullable=True)  #: expected label, if given
    #: the confidence a decision endpoint reported (vLLM's: top probability x label mass)
    endpoint_confidence: Mapped[float | None] = mapped_column(Float, nullable=True)
