"""``run_chunk``: claim a chunk of decisions, run them concurrently, commit each as it finishes.

    claim (one guarded UPDATE) -> plan each decision -> DecisionFlow <-> Upstream.read
    -> finish_decision (answers + draws + attempt + status, one transaction) per decision

All decisions of a chunk share one event loop, the upstream's connection pool and one bound on
reads in flight. Leases are renewed in the background every ``lease_s / 3``. SQL work runs in
threads (``asyncio.to_thread``) so the loop keeps reading while a commit waits.

Failures become attempt rows: ``UpstreamUnavailable.kind`` (transient), ``bad_request``
(permanent), ``not_served`` or ``unauthorized`` (the upstream does not serve the run's model, or
refuses the worker's API key: the decision goes back to pending uncharged, and
``ChunkResult.not_served`` tells the caller to stop taking such work), ``malformed_response``
(transient, capped), a ``TemplateError`` (permanent, ``rejected``; a prompt that does not fit
the server's ``max_model_len`` is one, refused before any read), ``db_error`` (the commit
failed; recorded once the database answers again, or left to the sweeper when it does not). An
answer is never lost or written twice: the answers insert is idempotent and the first finished
attempt wins.

Independent of Celery: the Celery task and the embedded ``dreads run`` both call it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from app.decide import drive
from app.engine import (
    DecisionFlow,
    ReadRequest,
    ReadResult,
    ReadSettings,
    TextTokenizer,
    decision_from_payload,
    plan_decision,
    settings_from_dict,
)
from app.engine.types import Decision as EngineDecision
from app.errors import (
    ConfigError,
    InputError,
    ModelNotServed,
    StoreError,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.store.db import session_scope
from app.store.fingerprints import record_first_fingerprint
from app.store.models import OutcomeKind, Run
from app.store.queue import (
    AttemptInfo,
    Claimed,
    claim_decisions,
    fail_decision,
    finish_decision,
    release_unserved,
    renew_leases,
    translate_db_errors,
    utcnow,
)
from app.upstream.base import Upstream

__all__ = ["ChunkResult", "run_chunk"]

log = logging.getLogger("dreads.runner")

SessionFactory = sessionmaker[Session]
#: Called with each claimed decision before it runs (test hooks, progress).
BeforeDecision = Callable[[Claimed], None]


@dataclass
class ChunkResult:
    """What one chunk did. ``failed`` counts attempt outcomes other than ok, by kind."""

    claimed: int = 0
    done: int = 0
    won: int = 0  #: done decisions whose answers are the ones kept
    rejected: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    left_for_sweeper: int = 0  #: the database stayed down: nothing recorded, the lease expires
    n_reads: int = 0
    #: why this worker cannot serve the run (another model, a refused key; not charged)
    not_served: str | None = None

    def count(self, kind: str) -> None:
        self.failed[kind] = self.failed.get(kind, 0) + 1

    @property
    def upstream_down(self) -> bool:
        return any(k in self.failed for k in ("upstream_unreachable", "timeout", "server_error"))

    def as_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "done": self.done, "won": self.won,
                "rejected": self.rejected, "failed": dict(self.failed),
                "left_for_sweeper": self.left_for_sweeper, "n_reads": self.n_reads,
                "not_served": self.not_served}


@dataclass
class _Chunk:
    """Everything the decisions of one chunk share."""

    session_factory: SessionFactory
    upstream: Upstream
    tokenizer: TextTokenizer
    settings: ReadSettings
    max_model_len: int | None  #: the server's: a longer prompt + canvas is rejected unread
    info: AttemptInfo
    lease_s: float
    max_attempts: int
    commit_wait_s: float
    in_flight: asyncio.Semaphore
    result: ChunkResult
    before_decision: BeforeDecision | None
    open_claims: dict[int, Claimed] = field(default_factory=dict)

    async def read(self, request: ReadRequest) -> ReadResult:
        async with self.in_flight:
            return await self.upstream.read(request)

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(_in_transaction, self.session_factory, fn, *args, **kwargs)


def _in_transaction(factory: SessionFactory, fn: Callable[..., Any], *args: Any,
                    **kwargs: Any) -> Any:
    with translate_db_errors(getattr(fn, "__name__", "store")), session_scope(factory) as s:
        return fn(s, *args, **kwargs)


async def run_chunk(*, run_id: int, decision_ids: Sequence[int], session_factory: SessionFactory,
                    upstream: Upstream, tokenizer: TextTokenizer, owner: str, lease_s: float,
                    max_in_flight: int, max_attempts: int = 5, task_id: str | None = None,
                    redelivered: bool = False, commit_wait_s: float = 30.0,
                    recover_wait_s: float = 0.0, probe: ReadRequest | None = None,
                    before_decision: BeforeDecision | None = None) -> ChunkResult:
    """Claim ``decision_ids`` of run ``run_id`` and run the ones won. A chunk whose decisions
    are done or held by another worker is a cheap no-op (one UPDATE).

    With ``recover_wait_s > 0``, a chunk that met an unavailable upstream waits (up to that
    long) for it to answer ``probe`` again before returning, so a worker does not burn through
    the queue while its model server is down. Raises StoreError if the claim itself fails.
    """
    result = ChunkResult()
    claims, settings, fingerprint = await asyncio.to_thread(
        _in_transaction, session_factory, _claim_chunk, run_id, decision_ids=list(decision_ids),
        owner=owner, lease_s=lease_s, max_attempts=max_attempts)
    result.claimed = len(claims)
    if settings is None:
        return result
    limit = (fingerprint or {}).get("max_model_len")
    max_model_len = limit if isinstance(limit, int) else None
    if tokenizer.info.name != settings.tokenizer:
        # Canvases are built with the run's own tokenizer (recorded at submit), whatever this
        # worker was started with; load_tokenizer caches it per process.
        tokenizer = await asyncio.to_thread(_run_tokenizer, settings.tokenizer)
    chunk = _Chunk(session_factory=session_factory, upstream=upstream, tokenizer=tokenizer,
                   settings=settings, max_model_len=max_model_len or upstream.max_model_len,
                   info=AttemptInfo(worker=owner, task_id=task_id, redelivered=redelivered),
                   lease_s=lease_s, max_attempts=max_attempts, commit_wait_s=commit_wait_s,
                   in_flight=asyncio.Semaphore(max_in_flight), result=result,
                   before_decision=before_decision,
                   open_claims={c.id: c for c in claims})
    await _run_claims(chunk, claims)
    if not fingerprint and result.done:
        await _record_fingerprint(session_factory, run_id, upstream)
    if recover_wait_s > 0 and result.upstream_down:
        await _wait_upstream(upstream, recover_wait_s, probe)
    return result


def _run_tokenizer(name: str) -> TextTokenizer:
    from app.upstream.tokenizer import load_tokenizer

    return load_tokenizer(name)


def _claim_chunk(session: Session, run_id: int,
                 **claim: Any) -> tuple[list[Claimed], ReadSettings | None, dict[str, Any] | None]:
    """The claims won and, when there are any, the run's settings and its server fingerprint
    (None: not recorded yet): one transaction."""
    claims = claim_decisions(session, **claim)
    if not claims:
        return claims, None, None
    data, fingerprint = session.execute(
        select(Run.settings, Run.fingerprint).where(Run.id == run_id)).one()
    return claims, settings_from_dict(dict(data)), dict(fingerprint) if fingerprint else None


async def _record_fingerprint(factory: SessionFactory, run_id: int, upstream: Upstream) -> None:
    """The first decisions this run's server answered (its run was created over HTTP, or by a
    submit that could not reach the server): record the server's fingerprint, so that resume
    can check against it."""
    try:
        fingerprint = await upstream.fingerprint()
        await asyncio.to_thread(_in_transaction, factory, record_first_fingerprint, run_id,
                                fingerprint)
    except (UpstreamError, StoreError) as exc:  # the reads will say more; try next chunk
        log.info("server fingerprint of run %s not recorded yet: %s", run_id, exc.message)


async def _run_claims(chunk: _Chunk, claims: Sequence[Claimed]) -> None:
    renewer = asyncio.create_task(_renew_forever(chunk))
    try:
        async with asyncio.TaskGroup() as group:
            for claim in claims:
                group.create_task(_run_guarded(chunk, claim))
    finally:
        renewer.cancel()
        await asyncio.gather(renewer, return_exceptions=True)


async def _renew_forever(chunk: _Chunk) -> None:
    while True:
        await asyncio.sleep(chunk.lease_s / 3)
        claims = list(chunk.open_claims.values())
        if not claims:
            continue
        try:
            renewed = await chunk.db(renew_leases, claims=claims, lease_s=chunk.lease_s)
        except StoreError as exc:
            log.warning("could not renew %d lease(s): %s", len(claims), exc.message)
            continue
        if len(renewed) < len(claims):
            log.info("%d lease(s) were taken over; their results count only if first",
                     len(claims) - len(renewed))


async def _run_guarded(chunk: _Chunk, claim: Claimed) -> None:
    """Run one decision; an unexpected error is recorded, never allowed to stop its siblings."""
    try:
        await _run_decision(chunk, claim, utcnow(), time.perf_counter())
    except Exception as exc:  # a bug must not take the chunk down; the attempt row says what
        log.exception("decision %s (%s) crashed", claim.id, claim.key)
        await _record_failure(chunk, claim, OutcomeKind.WORKER_LOST,
                              f"internal error: {type(exc).__name__}: {exc}", permanent=False)
    finally:
        chunk.open_claims.pop(claim.id, None)


async def _run_decision(chunk: _Chunk, claim: Claimed, started: datetime, t0: float) -> None:
    if chunk.before_decision is not None:
        chunk.before_decision(claim)
    try:
        decision = decision_from_payload(claim.key, claim.cell, claim.payload)
        plan = plan_decision(decision, chunk.settings, chunk.tokenizer,
                             max_model_len=chunk.max_model_len)
    except (InputError, ConfigError) as exc:  # ConfigError: no read of these settings can run
        await _record_failure(chunk, claim, OutcomeKind.REJECTED, exc.message, permanent=True)
        return
    flow = DecisionFlow(plan, chunk.settings, vocab_size=chunk.tokenizer.info.vocab_size,
                        replicate=claim.replicate)
    try:
        await drive(flow, chunk.read)
    except (ModelNotServed, UpstreamUnauthorized) as exc:
        chunk.result.n_reads += flow.n_reads
        await _release_unserved(chunk, claim, exc.kind, exc.message)
        return
    except UpstreamError as exc:
        chunk.result.n_reads += flow.n_reads
        await _record_failure(chunk, claim, exc.kind, exc.message,
                              permanent=isinstance(exc, UpstreamRejected))
        return
    chunk.result.n_reads += flow.n_reads
    await _commit(chunk, claim, decision, flow, started, t0)


async def _commit(chunk: _Chunk, claim: Claimed, decision: EngineDecision, flow: DecisionFlow,
                  started: datetime, t0: float) -> None:
    info = replace(chunk.info, n_reads=flow.n_reads,
                   latency_ms=(time.perf_counter() - t0) * 1000.0, started_at=started)
    try:
        won = await chunk.db(finish_decision, claim=claim, answers=flow.answers(),
                             draws=flow.draws(), attempt=info,
                             question_ids=[q.id for q in decision.questions],
                             expected=decision.expected)
    except StoreError as exc:
        log.warning("commit of decision %s failed: %s", claim.id, exc.message)
        await _record_failure(chunk, claim, OutcomeKind.DB_ERROR, exc.message, permanent=False,
                              wait_for_db=True)
        return
    chunk.result.done += 1
    chunk.result.won += int(won)


async def _record_failure(chunk: _Chunk, claim: Claimed, kind: str, detail: str, *,
                          permanent: bool, wait_for_db: bool = False) -> None:
    if wait_for_db and not await _wait_db(chunk.session_factory, chunk.commit_wait_s):
        chunk.result.left_for_sweeper += 1
        return
    try:
        status = await chunk.db(fail_decision, claim=claim, kind=kind, detail=detail,
                                permanent=permanent, attempt=chunk.info,
                                max_attempts=chunk.max_attempts)
    except StoreError as exc:
        log.warning("could not record %s for decision %s (%s); the sweeper will",
                    kind, claim.id, exc.message)
        chunk.result.left_for_sweeper += 1
        return
    if status == "rejected":
        chunk.result.rejected += 1
    chunk.result.count(kind)


async def _release_unserved(chunk: _Chunk, claim: Claimed, kind: str, detail: str) -> None:
    """Back to pending, not charged: this worker cannot serve the run (its upstream serves
    another model, or refuses its key)."""
    chunk.result.not_served = detail
    chunk.result.count(kind)
    try:
        await chunk.db(release_unserved, claim=claim, detail=detail, attempt=chunk.info,
                       kind=kind)
    except StoreError as exc:
        log.warning("could not release decision %s (%s); its lease expires", claim.id,
                    exc.message)
        chunk.result.left_for_sweeper += 1


async def _wait_db(factory: SessionFactory, timeout_s: float) -> bool:
    """Poll ``SELECT 1`` until the database answers or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await asyncio.to_thread(_in_transaction, factory, _ping)
            return True
        except StoreError:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _ping(session: Session) -> None:
    session.execute(text("SELECT 1"))


async def _wait_upstream(upstream: Upstream, timeout_s: float, probe: ReadRequest | None) -> None:
    log.warning("the upstream failed; waiting up to %.0f s for it before the next chunk",
                timeout_s)
    try:
        await upstream.wait_ready(timeout_s=timeout_s, probe=probe)
    except UpstreamUnavailable as exc:
        log.warning("the upstream is still unavailable: %s", exc.message)
