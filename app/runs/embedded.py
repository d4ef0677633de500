"""``dreads run``: the embedded mode. One SQLite file, one process, no Redis, no worker.

A run answered by a decision endpoint (``--answer-by systemone|decisions``) is executed the
same way; its chunks share one ``EndpointPool`` (the run's budget), and no upstream is read.

The same lease/claim/commit logic as the distributed mode (``app.runs.chunk.run_chunk``) is
driven by a local executor: an asyncio loop whose slots take chunks of claimable decisions and
run them with a bound on reads in flight, plus the sweeper's lease expiry
(``app.runs.sweep.expire_dead_leases``) between rounds.

Crash safety: one executor at a time holds an exclusive lock on ``<db>.lock``. Holding it
proves every ``embedded:`` lease in the file belongs to a dead process (a Ctrl-C'd or killed
earlier run), so those leases are expired at once on start: the sweep records a
``worker_lost`` attempt for each and puts it back to pending. Nothing is lost or doubled: the
answers insert is idempotent and the first finished attempt wins.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from app.connect.factory import UpstreamConfig
from app.engine import (
    SIM,
    ReadSettings,
    TextTokenizer,
    build_probe_request,
    plans_reads,
    settings_from_dict,
)
from app.errors import (
    InputError,
    ModelNotServed,
    OutcomeKind,
    RunPaused,
    UpstreamRejected,
    UpstreamUnauthorized,
)
from app.images import ImageCache, ImagePolicy
from app.runs.answer import EndpointOptions, EndpointPool
from app.runs.breaker import BreakerPolicy
from app.runs.budget import PodMeter
from app.runs.chunk import Answerers, ChunkPolicy, ChunkResult, Delivery, run_chunk
from app.runs.probe import reads_config
from app.runs.sweep import expire_dead_leases
from app.sim.key import answer_key_of
from app.store.breaker import pause_kind, pause_reason
from app.store.db import disposing, make_engine, make_sessionmaker, session_scope
from app.store.local import (
    claimable_ids as _claimable_ids,
)
from app.store.local import (
    draws_used,
    expire_leases_of,
    release_leases_of,
    settled_count,
)
from app.store.migrate import upgrade
from app.store.queue import utcnow
from app.store.records import PauseKind
from app.store.runs import RunInfo
from app.store.types import Session, SessionFactory
from app.upstream.base import Upstream

__all__ = [
    "OWNER_PREFIX",
    "SIM",
    "EmbeddedConfig",
    "ExecutorStats",
    "claimable_ids",
    "draws_used",
    "embedded_lock",
    "execute_run",
    "open_sqlite",
    "reclaim_dead_leases",
    "release_own_leases",
    "settled_count",
    "sim_key_path",
    "sqlite_store",
    "sqlite_url",
    "start_upstream",
]

log = logging.getLogger("dreads.embedded")

OWNER_PREFIX = "embedded:"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EmbeddedConfig:
    """How the local executor runs (the entry point builds it from its flags and
    ``DREADS_*``)."""

    chunk_size: int = 16
    workers: int = 4  #: chunks in progress at once
    max_in_flight: int = 64  #: reads in flight, all chunks together
    lease_s: float = 120.0
    max_attempts: int = 5
    ready_timeout_s: float = 60.0
    max_rounds: int = 20  #: passes over the claimable decisions (bounded)
    poll_s: float = 0.5  #: progress refresh
    #: the engine that reads (with its read limits and key), when no upstream is given
    engine: UpstreamConfig = field(default_factory=UpstreamConfig)
    #: how a run answered by a decision endpoint asks it
    endpoints: EndpointOptions = field(default_factory=EndpointOptions)
    #: when the run pauses (its recent attempts keep failing the same way)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    #: what the decisions' images may be fetched from (``DREADS_IMAGE_*``)
    images: ImagePolicy = field(default_factory=ImagePolicy)
    #: this machine's GPU price per hour (``DREADS_GPU_PRICE_HOUR``): its read time's cost
    gpu_price_hour: float | None = None
    #: ``--upstream sim``: the simulator's joint-read interference (``SimOptions``)
    sim_joint_interference: float = 0.0

    def policy(self) -> ChunkPolicy:
        return ChunkPolicy(lease_s=self.lease_s, max_in_flight=self.max_in_flight,
                           max_attempts=self.max_attempts, breaker=self.breaker)


@dataclass
class ExecutorStats:
    rounds: int = 0
    chunks: int = 0
    reclaimed: int = 0  #: leases of a dead earlier process put back to pending
    failed: dict[str, int] = field(default_factory=dict)
    n_reads: int = 0
    #: why the run stopped early (a refused key, a model not served): raised by execute_run
    stopped: UpstreamRejected | None = None
    paused: bool = False  #: the run paused (the breaker): no more chunks are taken

    def add(self, result: ChunkResult) -> None:
        self.chunks += 1
        self.n_reads += result.n_reads
        for kind, n in result.failed.items():
            self.failed[kind] = self.failed.get(kind, 0) + n


def sqlite_url(db_path: Path) -> str:
    return f"sqlite:///{db_path.resolve()}"


def open_sqlite(db_path: Path) -> SessionFactory:
    """The SQLite store at ``db_path``, created or upgraded through Alembic."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    url = sqlite_url(db_path)
    upgrade(url)
    return make_sessionmaker(make_engine(url))


@contextmanager
def sqlite_store(db_path: Path) -> Iterator[SessionFactory]:
    """``open_sqlite`` whose engine is disposed on exit."""
    with disposing(open_sqlite(db_path)) as factory:
        yield factory


@contextmanager
def embedded_lock(db_path: Path) -> Iterator[None]:
    """Exclusive per-database lock (``<db>.lock``); a second executor is refused."""
    lock_path = db_path.with_name(db_path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle: IO[str] = lock_path.open("w")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InputError(
                f"another `dreads run` is using {db_path}; wait for it to finish, or give "
                "this one its own --database-url"
            ) from exc
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def sim_key_path(job_file: Path) -> Path | None:
    """``examples/foo.jsonl`` -> ``examples/foo.key.jsonl`` when that file exists."""
    key = answer_key_of(job_file)
    return key if key.is_file() else None


def start_upstream(upstream: str, settings: ReadSettings, key: Path | None, *,
                   joint_interference: float = 0.0) -> tuple[str, Any]:
    """(base URL, simulator handle or None). ``sim`` serves the simulator in a thread,
    answering with the answer key ``key`` when one is given (``sim_key_path``), with
    ``joint_interference`` (``SimOptions``; ``DREADS_SIM_JOINT_INTERFERENCE``)."""
    if upstream != SIM:
        return upstream, None
    from app.sim.options import SimOptions
    from app.sim.server import start_sim_thread

    options = SimOptions(model=settings.model, canvas_length=settings.canvas_length,
                         tokenizer=settings.tokenizer, key_path=str(key) if key else None,
                         joint_interference=joint_interference)
    handle = start_sim_thread(options)
    return handle.url, handle


def reclaim_dead_leases(factory: SessionFactory, run_id: int, *, max_attempts: int) -> int:
    """Expire every ``embedded:`` lease of the run (call only while holding the lock), then
    sweep: each becomes a ``worker_lost`` attempt and goes back to pending."""
    with session_scope(factory) as session:
        expire_leases_of(session, run_id, owner_prefix=OWNER_PREFIX, now=utcnow())
    lost, poisoned = expire_dead_leases(factory, max_attempts, run_id)
    return lost + poisoned


def release_own_leases(factory: SessionFactory, run_id: int) -> int:
    """After Ctrl-C: this process's leases go back to pending with a ``cancelled`` attempt
    each, and the interrupted claim does not count against the attempt cap."""
    with session_scope(factory) as session:
        return release_leases_of(session, run_id, owner=_owner(),
                                 detail="interrupted (Ctrl-C) before a result")


def claimable_ids(session: Session, run_id: int, *, max_attempts: int) -> list[int]:
    """Decisions a claim could win now (pending, queued, expired lease, under the cap); none
    once the run is cancelled."""
    return _claimable_ids(session, run_id, max_attempts=max_attempts, now=utcnow())


def _owner() -> str:
    return f"{OWNER_PREFIX}{socket.gethostname()}:{os.getpid()}"


async def execute_run(
    factory: SessionFactory,
    run: RunInfo,
    *,
    upstream_url: str,
    tokenizer: TextTokenizer,
    config: EmbeddedConfig,
    progress: Progress | None = None,
    upstream: Upstream | None = None,
    endpoints: EndpointPool | None = None,
) -> ExecutorStats:
    """Run every claimable decision of ``run`` to a settled state (bounded rounds).

    ``upstream``: one the caller owns and shares (``dreads serve``); default: one made here
    from ``config.engine`` for ``upstream_url`` and closed at the end. A run answered by a
    decision endpoint reads nothing itself: its decisions go to the endpoint through
    ``endpoints`` (default: a pool made here, ``sim`` meaning ``upstream_url``).

    Raises:
        UpstreamUnauthorized, ModelNotServed: the upstream or endpoint refuses this process's
            key or the run's model: the run stops, its decisions back to pending uncharged.
        RunPaused: the run paused (the breaker, or its budget): it stops once the decisions in
            flight end, resumable.
    """
    settings = settings_from_dict(dict(run.settings))
    stats = ExecutorStats()
    poller = asyncio.create_task(_poll(factory, run.id, config.poll_s, progress))
    try:
        if plans_reads(settings.answer_by):
            await _execute_reads(factory, run, settings, upstream_url, tokenizer, config, stats,
                                 upstream=upstream)
        else:
            pool = endpoints or EndpointPool(config.endpoints, urls={SIM: upstream_url})
            try:
                await _rounds(factory, run, Answerers(None, tokenizer, endpoints=pool), config,
                              stats)
            finally:
                if endpoints is None:
                    await pool.aclose()
    finally:
        poller.cancel()
        await _report_progress(factory, run.id, progress)
    paused = await asyncio.to_thread(_pause_reason, factory, run.id)
    if paused is not None:
        kind, reason = paused
        raise RunPaused(f"run {run.name} paused: {reason}", budget=kind == PauseKind.BUDGET)
    return stats


def _pause_reason(factory: SessionFactory, run_id: int) -> tuple[str | None, str] | None:
    """What paused the run and why, or None when it is not paused."""
    with session_scope(factory) as session:
        reason = pause_reason(session, run_id)
        return None if reason is None else (pause_kind(session, run_id), reason)


async def _execute_reads(factory: SessionFactory, run: RunInfo, settings: ReadSettings,
                         upstream_url: str, tokenizer: TextTokenizer, config: EmbeddedConfig,
                         stats: ExecutorStats, *, upstream: Upstream | None) -> None:
    from app.connect.factory import make_upstream

    reader = upstream or make_upstream(reads_config(
        config.engine, upstream_url, settings, max_in_flight=config.max_in_flight))
    try:
        probe = build_probe_request(settings, tokenizer)
        await reader.wait_ready(timeout_s=config.ready_timeout_s, probe=probe)
        answerers = Answerers(reader, tokenizer, images=ImageCache(config.images),
                              meter=PodMeter(config.gpu_price_hour))
        await _rounds(factory, run, answerers, config, stats)
    finally:
        if upstream is None:
            await reader.aclose()


async def _rounds(factory: SessionFactory, run: RunInfo, answerers: Answerers,
                  config: EmbeddedConfig, stats: ExecutorStats) -> None:
    for _ in range(config.max_rounds):
        ids = await asyncio.to_thread(_claimable, factory, run.id, config.max_attempts)
        if not ids:
            return
        stats.rounds += 1
        queue: asyncio.Queue[Sequence[int]] = asyncio.Queue()
        for start in range(0, len(ids), config.chunk_size):
            queue.put_nowait(ids[start:start + config.chunk_size])
        slots = [_slot(queue, factory, run.id, answerers, config.policy(), stats)
                 for _ in range(max(1, config.workers))]
        await asyncio.gather(*slots)
        if stats.stopped is not None:
            raise stats.stopped
        if stats.paused:
            return


def _claimable(factory: SessionFactory, run_id: int, max_attempts: int) -> list[int]:
    expire_dead_leases(factory, max_attempts, run_id)
    with session_scope(factory) as session:
        return claimable_ids(session, run_id, max_attempts=max_attempts)


async def _slot(queue: asyncio.Queue[Sequence[int]], factory: SessionFactory, run_id: int,
                answerers: Answerers, policy: ChunkPolicy, stats: ExecutorStats) -> None:
    delivery = Delivery(_owner())
    while not queue.empty() and stats.stopped is None and not stats.paused:
        chunk = queue.get_nowait()
        result = await run_chunk(factory, run_id, chunk, answerers=answerers, policy=policy,
                                 delivery=delivery)
        stats.add(result)
        stats.paused = stats.paused or result.paused is not None \
            or OutcomeKind.PAUSED in result.failed
        if result.not_served is not None and stats.stopped is None:
            # every request would be refused the same way: stop, nothing charged
            unauthorized = OutcomeKind.UNAUTHORIZED in result.failed
            stats.stopped = (UpstreamUnauthorized if unauthorized
                             else ModelNotServed)(result.not_served)


async def _poll(factory: SessionFactory, run_id: int, period_s: float,
                progress: Progress | None) -> None:
    if progress is None:
        return
    while True:
        await _report_progress(factory, run_id, progress)
        await asyncio.sleep(period_s)


async def _report_progress(factory: SessionFactory, run_id: int,
                           progress: Progress | None) -> None:
    if progress is None:
        return
    settled, total = await asyncio.to_thread(_settled, factory, run_id)
    progress(settled, total)


def _settled(factory: SessionFactory, run_id: int) -> tuple[int, int]:
    with session_scope(factory) as session:
        return settled_count(session, run_id)
