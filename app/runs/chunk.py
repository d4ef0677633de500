"""``run_chunk``: claim a chunk of decisions, run them concurrently, commit each as it finishes.

    claim (rows locked, then leased) -> the run's answer source answers each decision
    -> finish_decisions (answers + draws + attempt + status) as each finishes, those that
       finish together in one transaction (group commit), with what they spent added to the
       run's spend and its budget checked (``app.runs.budget``)

The answer source (``app.runs.answer``) is the run's: dreads' reads (plan -> DecisionFlow <->
Upstream.read) or a decision endpoint (one request per decision, its budget shared by every
chunk of the run in this process through ``EndpointPool``); a question the endpoint refused is
a ``refused`` attempt row of the winning attempt. All decisions of a chunk share one event
loop, the upstream's connection pool and one bound on reads in flight. Leases are renewed in
the background every ``lease_s / 3``. SQL work runs in threads (``asyncio.to_thread``) so the
loop keeps reading while a commit waits.

Failures become attempt rows: ``UpstreamUnavailable.kind`` (transient; a run whose recent
attempts keep failing with one such kind pauses: ``app.runs.breaker``), ``bad_request``
(permanent), ``not_served`` or ``unauthorized`` (the upstream does not serve the run's model, or
refuses the worker's API key: the decision goes back to pending uncharged, and
``ChunkResult.not_served`` tells the caller to stop taking such work), ``malformed_response``
(transient, capped), ``image_unreachable`` (an image did not answer or could not be read
when the worker fetched it: transient, capped), ``image_changed`` (an image's bytes differ
from the ones checked at submit: permanent), a ``TemplateError`` (permanent, ``rejected``; a
prompt that does not fit the server's ``max_model_len`` is one, refused before any read),
``db_error`` (the commit failed; recorded once the database answers again, or left to the
sweeper when it does not). An answer is never lost or written twice: the answers insert is
idempotent and the first finished attempt wins.

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

from app.engine import (
    ReadRequest,
    ReadResult,
    ReadSettings,
    TextTokenizer,
    decision_from_payload,
    plans_reads,
    settings_from_dict,
)
from app.engine.types import Decision as EngineDecision
from app.errors import (
    ConfigError,
    ImageChanged,
    ImageError,
    InputError,
    ModelNotServed,
    OutcomeKind,
    StoreError,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.images import ImageCache, stored_images
from app.runs.answer import Answered, AnswerSource, EndpointPool, ReadsSource
from app.runs.breaker import BreakerPolicy, Failure, Recorded, record_failure
from app.runs.budget import ChunkSpend, PodMeter
from app.runs.commit import GroupCommit, in_transaction
from app.store.dialects import ping
from app.store.fingerprints import record_first_fingerprint
from app.store.lookups import run_header
from app.store.models import DecisionStatus
from app.store.queue import (
    AttemptInfo,
    Claimed,
    Finished,
    claim_decisions,
    release_unserved,
    renew_leases,
    utcnow,
)
from app.store.spend import RunPrices, run_prices
from app.store.types import Session, SessionFactory
from app.telemetry.worker import (
    record_answers,
    record_attempt,
    record_lease_takeovers,
    record_read,
    start_run,
)
from app.upstream.base import Upstream

__all__ = ["Answerers", "BeforeDecision", "ChunkPolicy", "ChunkResult", "Delivery", "HandOff",
           "run_chunk"]

log = logging.getLogger("dreads.runner")

#: Outcomes of an upstream that is down (rather than of a decision).
_UPSTREAM_DOWN = (OutcomeKind.UPSTREAM_UNREACHABLE, OutcomeKind.TIMEOUT,
                  OutcomeKind.SERVER_ERROR)
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
    #: after a chunk that met a down upstream and waited for it: whether it answered again
    upstream_ready: bool | None = None
    #: a failure of this chunk paused the run (the breaker): why
    paused: str | None = None

    def count(self, kind: str) -> None:
        self.failed[kind] = self.failed.get(kind, 0) + 1

    @property
    def upstream_down(self) -> bool:
        return any(k in self.failed for k in _UPSTREAM_DOWN)

    def as_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "done": self.done, "won": self.won,
                "rejected": self.rejected, "failed": dict(self.failed),
                "left_for_sweeper": self.left_for_sweeper, "n_reads": self.n_reads,
                "not_served": self.not_served, "paused": self.paused}


@dataclass(frozen=True)
class ChunkPolicy:
    """How this process runs its chunks (``app.runs.settings.chunk_policy`` builds it from
    ``DREADS_*``)."""

    lease_s: float = 15.0  #: renewed every third of it while a decision runs
    max_in_flight: int = 256  #: reads in flight, all of the chunk's decisions together
    max_attempts: int = 5  #: claims of a decision before it stops as failed
    commit_wait_s: float = 30.0  #: how long a failed commit waits for the database to answer
    #: how long a chunk that met an unavailable upstream waits for it to answer the probe
    #: again before returning (0: not at all), so a worker does not burn through the queue
    #: while its model server is down
    recover_wait_s: float = 0.0
    #: when a run whose recent attempts keep failing the same way pauses
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


@dataclass(frozen=True)
class Answerers:
    """Who answers in this process: the upstream and tokenizer of runs answered by reads (the
    tokenizer is replaced by the run's own when it differs), the decision endpoints of runs
    answered by one (shared by every chunk, so a run's budget is the process's), and the
    readiness probe a down upstream must answer again."""

    upstream: Upstream | None
    tokenizer: TextTokenizer
    endpoints: EndpointPool | None = None
    probe: ReadRequest | None = None
    #: the images this process fetched, by sha256 (None: a cache of the chunk's own that
    #: reads no local file)
    images: ImageCache | None = None
    #: this process's share of its GPU pod's time and price (runs answered by reads)
    meter: PodMeter = field(default_factory=PodMeter)


@dataclass(frozen=True)
class Delivery:
    """Who runs the chunk (the lease owner) and the message it came in."""

    owner: str
    task_id: str | None = None
    redelivered: bool = False


@dataclass(frozen=True)
class HandOff:
    """Called once, as soon as no more than ``at`` of the chunk's decisions are still running
    and none met a failing upstream."""

    at: int
    call: Callable[[], None]


@dataclass
class _Chunk:
    """Everything the decisions of one chunk share."""

    session_factory: SessionFactory
    upstream: Upstream | None  #: None for a run answered by a decision endpoint
    run_name: str  #: the metrics' run label
    info: AttemptInfo
    policy: ChunkPolicy
    in_flight: asyncio.Semaphore
    result: ChunkResult
    before_decision: BeforeDecision | None
    open_claims: dict[int, Claimed] = field(default_factory=dict)
    source: AnswerSource | None = None  #: set once the run's settings are known
    hand_off: HandOff | None = None  #: called once, then None
    committer: GroupCommit = field(init=False)

    spend: ChunkSpend | None = None  #: how its commits record spend (the run's)

    def __post_init__(self) -> None:
        assert self.spend is not None, "a chunk records its run's spend"
        self.committer = GroupCommit(self.session_factory, self.spend)

    def decision_ended(self, claim: Claimed) -> None:
        self.open_claims.pop(claim.id, None)
        if self.hand_off is not None and len(self.open_claims) <= self.hand_off.at \
                and not self.result.upstream_down:
            hand_off, self.hand_off = self.hand_off, None
            hand_off.call()

    async def read(self, request: ReadRequest) -> ReadResult:
        assert self.upstream is not None, "a run answered by reads needs an upstream"
        async with self.in_flight:
            t0 = time.perf_counter()
            outcome: str = OutcomeKind.OK
            try:
                return await self.upstream.read(request)
            except UpstreamError as exc:
                outcome = exc.kind
                raise
            except BaseException:
                outcome = OutcomeKind.ERROR
                raise
            finally:
                record_read(self.run_name, outcome, time.perf_counter() - t0)

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(in_transaction, self.session_factory, fn, *args, **kwargs)


async def run_chunk(factory: SessionFactory, run_id: int, decision_ids: Sequence[int], *,
                    answerers: Answerers, policy: ChunkPolicy, delivery: Delivery,
                    hand_off: HandOff | None = None,
                    before_decision: BeforeDecision | None = None) -> ChunkResult:
    """Claim ``decision_ids`` of run ``run_id`` and run the ones won. A chunk whose decisions
    are done or held by another worker is a cheap no-op (one UPDATE).

    ``hand_off`` lets the caller start its next chunk while this one's slowest decisions (those
    that draw the most) finish, so the reads in flight do not drain at every chunk's end. It
    is not called when the chunk ends first, and never after an upstream failure (the worker
    waits instead of taking more work). Raises StoreError if the claim itself fails.
    """
    result = ChunkResult()
    claims, run, max_model_len = await asyncio.to_thread(
        in_transaction, factory, _claim_chunk, run_id, decision_ids=list(decision_ids),
        owner=delivery.owner, lease_s=policy.lease_s, max_attempts=policy.max_attempts)
    result.claimed = len(claims)
    if run is None:
        return result
    run_name, settings, recorded, prices = run
    start_run(run_name)
    upstream = answerers.upstream
    by_reads = plans_reads(settings.answer_by)
    meter = answerers.meter if by_reads else None
    chunk = _Chunk(session_factory=factory, upstream=upstream, run_name=run_name,
                   info=AttemptInfo(worker=delivery.owner, task_id=delivery.task_id,
                                    redelivered=delivery.redelivered),
                   policy=policy, in_flight=asyncio.Semaphore(policy.max_in_flight),
                   result=result, before_decision=before_decision,
                   open_claims={c.id: c for c in claims}, hand_off=hand_off,
                   spend=ChunkSpend(run_id, run_name, prices, meter))
    if meter is not None:
        meter.begin()
    try:
        served_len = upstream.max_model_len if upstream is not None else None
        chunk.source = await _source(chunk, run_id, settings, answerers,
                                     max_model_len or served_len)
        await _run_claims(chunk, claims)
    finally:
        result.n_reads += chunk.source.n_requests if chunk.source is not None else 0
        if meter is not None:
            meter.end()
    if chunk.committer.paused is not None and result.paused is None:
        result.paused = chunk.committer.paused
        log.warning("run %s paused: %s", run_name, result.paused)
    if upstream is None or not by_reads:
        return result
    if not recorded and result.done:
        await _record_fingerprint(factory, run_id, upstream)
    if policy.recover_wait_s > 0 and result.upstream_down:
        result.upstream_ready = await _wait_upstream(upstream, policy.recover_wait_s,
                                                     answerers.probe)
    return result


async def _source(chunk: _Chunk, run_id: int, settings: ReadSettings, answerers: Answerers,
                  max_model_len: int | None) -> AnswerSource:
    """The run's answer source for this chunk."""
    if not plans_reads(settings.answer_by):
        if answerers.endpoints is None:
            raise ValueError("a run answered by a decision endpoint needs Answerers.endpoints")
        return answerers.endpoints.source(run_id, settings)
    tokenizer = answerers.tokenizer
    if tokenizer.info.name != settings.tokenizer:
        # Canvases are built with the run's own tokenizer (recorded at submit), whatever this
        # worker was started with; load_tokenizer caches it per process.
        tokenizer = await asyncio.to_thread(_run_tokenizer, settings.tokenizer)
    # the server's max_model_len: a longer prompt + canvas is rejected unread
    return ReadsSource(chunk.read, tokenizer, settings, max_model_len=max_model_len,
                       images=answerers.images)


def _run_tokenizer(name: str) -> TextTokenizer:
    from app.tokenizer.hf import load_tokenizer

    return load_tokenizer(name)


def _claim_chunk(session: Session, run_id: int, **claim: Any
                 ) -> tuple[list[Claimed], tuple[str, ReadSettings, bool, RunPrices] | None,
                            int | None]:
    """The claims won and, when there are any, the run's name, settings, whether its server
    fingerprint is recorded and its prices and budget (the chunk's commits use them), and the
    context length its server reported: one transaction."""
    claims = claim_decisions(session, **claim)
    if not claims:
        return claims, None, None
    name, data, fingerprint = run_header(session, run_id)
    limit = (fingerprint or {}).get("max_model_len")
    return (claims, (name, settings_from_dict(data), bool(fingerprint),
                     run_prices(session, run_id)),
            limit if isinstance(limit, int) else None)


async def _record_fingerprint(factory: SessionFactory, run_id: int, upstream: Upstream) -> None:
    """The first decisions this run's server answered (its run was created over HTTP, or by a
    submit that could not reach the server): record the server's fingerprint, so that resume
    can check against it."""
    try:
        fingerprint = await upstream.fingerprint()
        await asyncio.to_thread(in_transaction, factory, record_first_fingerprint, run_id,
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
        await asyncio.sleep(chunk.policy.lease_s / 3)
        claims = list(chunk.open_claims.values())
        if not claims:
            continue
        try:
            renewed = await chunk.db(renew_leases, claims=claims, lease_s=chunk.policy.lease_s)
        except StoreError as exc:
            log.warning("could not renew %d lease(s): %s", len(claims), exc.message)
            continue
        if len(renewed) < len(claims):
            record_lease_takeovers(chunk.run_name, len(claims) - len(renewed))
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
        chunk.decision_ended(claim)


async def _run_decision(chunk: _Chunk, claim: Claimed, started: datetime, t0: float) -> None:
    if chunk.before_decision is not None:
        chunk.before_decision(claim)
    assert chunk.source is not None
    try:
        decision = decision_from_payload(claim.key, claim.cell, claim.payload)
        answered = await chunk.source.answer(decision, replicate=claim.replicate,
                                             images=stored_images(claim.payload))
    except ImageChanged as exc:  # never answered about another picture
        await _record_failure(chunk, claim, exc.kind, exc.message, permanent=True)
        return
    except ImageError as exc:  # the URL (or file) may answer again: retried to the cap
        await _record_failure(chunk, claim, OutcomeKind.IMAGE_UNREACHABLE, exc.message,
                              permanent=False)
        return
    except (InputError, ConfigError) as exc:  # ConfigError: no read of these settings can run
        await _record_failure(chunk, claim, OutcomeKind.REJECTED, exc.message, permanent=True)
        return
    except (ModelNotServed, UpstreamUnauthorized) as exc:
        await _release_unserved(chunk, claim, exc.kind, exc.message)
        return
    except UpstreamError as exc:
        await _record_failure(chunk, claim, exc.kind, exc.message,
                              permanent=isinstance(exc, UpstreamRejected))
        return
    await _commit(chunk, claim, decision, answered, started, t0)


async def _commit(chunk: _Chunk, claim: Claimed, decision: EngineDecision, answered: Answered,
                  started: datetime, t0: float) -> None:
    info = replace(chunk.info, n_reads=answered.n_reads,
                   latency_ms=(time.perf_counter() - t0) * 1000.0, started_at=started,
                   usage=answered.usage)
    try:
        won = await chunk.committer.finish(Finished(
            claim=claim, answers=answered.answers, draws=answered.draws, attempt=info,
            question_ids=[q.id for q in decision.questions], expected=decision.expected,
            refusals=answered.refusals, input_tokens=answered.input_tokens,
            output_tokens=answered.output_tokens))
    except StoreError as exc:
        log.warning("commit of decision %s failed: %s", claim.id, exc.message)
        await _record_failure(chunk, claim, OutcomeKind.DB_ERROR, exc.message, permanent=False,
                              wait_for_db=True)
        return
    chunk.result.done += 1
    chunk.result.won += int(won)
    record_attempt(chunk.run_name, OutcomeKind.OK)
    if won:
        record_answers(chunk.run_name, answered.answers)
    if won and answered.refusals:
        for _ in answered.refusals:
            chunk.result.count(OutcomeKind.REFUSED)


async def _record_failure(chunk: _Chunk, claim: Claimed, kind: str, detail: str, *,
                          permanent: bool, wait_for_db: bool = False) -> None:
    if wait_for_db and not await _wait_db(chunk.session_factory, chunk.policy.commit_wait_s):
        chunk.result.left_for_sweeper += 1
        return
    failure = Failure(claim=claim, kind=kind, detail=detail, permanent=permanent,
                      attempt=chunk.info, max_attempts=chunk.policy.max_attempts)
    try:
        recorded: Recorded = await chunk.db(record_failure, failure,
                                            breaker=chunk.policy.breaker,
                                            run_name=chunk.run_name, now=utcnow())
    except StoreError as exc:
        log.warning("could not record %s for decision %s (%s); the sweeper will",
                    kind, claim.id, exc.message)
        chunk.result.left_for_sweeper += 1
        return
    if recorded.status == DecisionStatus.REJECTED:
        chunk.result.rejected += 1
    shown = OutcomeKind.PAUSED if recorded.uncharged else kind
    chunk.result.count(shown)
    record_attempt(chunk.run_name, shown)
    if recorded.paused is not None:
        chunk.result.paused = recorded.paused
        log.warning("run %s paused: %s", chunk.run_name, recorded.paused)


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
        return
    record_attempt(chunk.run_name, kind)


async def _wait_db(factory: SessionFactory, timeout_s: float) -> bool:
    """Poll ``SELECT 1`` until the database answers or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await asyncio.to_thread(in_transaction, factory, ping)
            return True
        except StoreError:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


async def _wait_upstream(upstream: Upstream, timeout_s: float, probe: ReadRequest | None
                         ) -> bool:
    log.warning("the upstream failed; waiting up to %.0f s for it before the next chunk",
                timeout_s)
    try:
        await upstream.wait_ready(timeout_s=timeout_s, probe=probe)
    except UpstreamUnavailable as exc:
        log.warning("the upstream is still unavailable: %s", exc.message)
        return False
    return True
