"""What the Celery wiring builds from ``Settings``: upstream, tokenizer, probe, the sweeper.

Kept apart from ``celery_app`` so the signal handlers stay one-liners and the pieces can be
reused by ``dreads worker`` and the benchmark.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from typing import Any

from app.config import Settings
from app.engine import ReadRequest, ReadSettings, TextTokenizer, build_probe_request, redact_url
from app.errors import ConfigError, UpstreamRejected, UpstreamUnavailable
from app.upstream.base import Upstream

__all__ = [
    "adopt_served_defaults",
    "answers_worker_setup",
    "make_probe",
    "make_tokenizer",
    "make_upstream_for",
    "served_queue",
    "start_prober",
    "start_sweeper",
    "stop_sweeper",
    "wait_upstream_ready",
]

log = logging.getLogger("dreads.worker")

#: How long one readiness round waits before logging and trying again.
READY_ROUND_S = 30.0
_sweeper: Any = None
_prober: Any = None


def make_upstream_for(settings: Settings) -> Upstream:
    """The worker's upstream: ``DREADS_UPSTREAM`` serving ``DREADS_MODEL`` on ``DREADS_CANVAS``,
    read by ``DREADS_ENGINE`` with the process's read limits and key."""
    from app.config import run_env
    from app.connect.factory import make_upstream
    from app.runs.settings import env_engine

    return make_upstream(replace(env_engine(run_env(settings)), url=settings.upstream,
                                 model=settings.model, canvas_length=settings.canvas,
                                 tokenizer=settings.tokenizer))


def served_queue(settings: Settings) -> str:
    """The queue of the runs this worker's upstream can read: its model and canvas."""
    from app.broker.names import queue_for

    return queue_for(settings.model, settings.canvas)


def answers_worker_setup(settings: Settings, processes: int | None) -> Settings:
    """An answers worker (``DREADS_WORKER_ANSWERS``), in its main process before the pool
    forks: no model server to wait for; its pool size goes into the settings the pool
    processes inherit, so each takes its share of a run's endpoint budget."""
    settings = settings.model_copy(update={"worker_processes": max(1, processes or 1)})
    log.info("answers worker %s: runs answered by decision endpoints, each run's budget split "
             "among %s process(es)", os.getpid(), settings.worker_processes)
    return settings


def make_tokenizer(settings: Settings) -> TextTokenizer:
    from app.tokenizer.hf import load_tokenizer

    return load_tokenizer(settings.tokenizer)


def make_probe(settings: Settings, tokenizer: TextTokenizer) -> ReadRequest | None:
    read = ReadSettings(model=settings.model, tokenizer=settings.tokenizer,
                        canvas_length=settings.canvas)
    return build_probe_request(read, tokenizer)


def wait_upstream_ready(settings: Settings, *, max_wait_s: float | None = None) -> Settings:
    """Block until the upstream answers a probe read; log every round. ``max_wait_s`` None
    waits for as long as it takes (a worker without its model server has nothing to do).
    Returns the settings with the served model and tokenizer where they were not set."""
    started = time.monotonic()
    settings = adopt_served_defaults(settings, max_wait_s=max_wait_s)
    tokenizer = make_tokenizer(settings)
    probe = make_probe(settings, tokenizer)
    while True:
        log.info("worker %s waits for its upstream %s", os.getpid(),
                 redact_url(settings.upstream))
        try:
            asyncio.run(_wait_once(settings, probe, READY_ROUND_S))
            return settings
        except UpstreamRejected as exc:
            raise ConfigError(
                f"the upstream {redact_url(settings.upstream)} refused the probe read "
                f"({exc.message}); "
                "check DREADS_MODEL, DREADS_CANVAS and DREADS_TOKENIZER against the server"
            ) from exc
        except UpstreamUnavailable as exc:
            log.warning("upstream not ready yet: %s", exc.message)
        if max_wait_s is not None and time.monotonic() - started > max_wait_s:
            raise ConfigError(f"the upstream {redact_url(settings.upstream)} was not ready "
                              f"within {max_wait_s:.0f} s; start it or fix DREADS_UPSTREAM")


def adopt_served_defaults(settings: Settings, *, max_wait_s: float | None = None) -> Settings:
    """``DREADS_MODEL`` / ``DREADS_TOKENIZER`` unset: wait for the server's model list and take
    its served model (and its tokenizer; the stand-in for the simulator), as
    ``app.runs.settings.served_identity_update`` says. The caller keeps the
    result (``workers.celery_app.use_settings``): pool children forked after it inherit it."""
    from app.config import run_env
    from app.runs.settings import served_identity_update

    started = time.monotonic()
    while True:
        try:
            update = served_identity_update(run_env(settings))
            break
        except (ConfigError, UpstreamUnavailable) as exc:
            if max_wait_s is not None and time.monotonic() - started > max_wait_s:
                raise
            log.info("worker %s waits for its upstream %s to list its model: %s",
                     os.getpid(), redact_url(settings.upstream), exc.message)
            time.sleep(min(5.0, READY_ROUND_S))
    if not update:
        return settings
    adopted = settings.model_copy(update=update)
    log.info("upstream %s serves %s; tokenizer %s", redact_url(settings.upstream),
             adopted.model, adopted.tokenizer)
    return adopted


async def _wait_once(settings: Settings, probe: ReadRequest | None, timeout_s: float) -> None:
    upstream = make_upstream_for(settings)
    try:
        await upstream.wait_ready(timeout_s=timeout_s, probe=probe)
    finally:
        await upstream.aclose()


def start_sweeper(celery_app: Any, settings: Settings) -> None:
    """Start this main process's sweeper thread (sweeps are serialised by a database lock)."""
    global _sweeper
    from app.config import run_env
    from app.runs.settings import sweep_policy
    from app.runs.sweep import SweeperThread, sweep_once
    from app.store.db import make_engine, make_sessionmaker

    engine = make_engine(settings.database_url, pool_size=1)
    # Pool children forked later (max_tasks_per_child) must not reuse this engine's sockets.
    os.register_at_fork(after_in_child=lambda: engine.dispose(close=False))
    factory = make_sessionmaker(engine)
    policy = sweep_policy(run_env(settings))

    def sweep() -> Any:
        return sweep_once(factory, celery_app, policy)

    _sweeper = SweeperThread(sweep, interval_s=settings.sweep_interval_s)
    _sweeper.start()
    start_prober(factory, settings)


def start_prober(factory: Any, settings: Settings) -> None:
    """Start this main process's breaker prober (``app.runs.half_open``): the runs paused by
    the breaker that this worker's upstream serves are probed with one read each interval
    (one worker per run and interval) and resumed when it is answered. An answers worker
    starts none (a run answered by a decision endpoint waits for ``dreads resume``)."""
    global _prober
    from app.config import run_env
    from app.runs.half_open import ProberThread, probe_due_runs
    from app.runs.settings import breaker_policy

    policy = breaker_policy(run_env(settings))
    if settings.worker_answers or not policy.probes:
        return
    served = served_queue(settings)
    probes: list[ReadRequest | None] = []  # built at the first probe: no cost at start-up

    def serves(run: Any) -> bool:
        from app.broker.names import queue_of_run

        return bool(queue_of_run(run.settings) == served)

    def probe(_run: Any) -> str | None:
        if not probes:
            probes.append(make_probe(settings, make_tokenizer(settings)))
        return _probe_once(settings, probes[0])

    _prober = ProberThread(lambda: probe_due_runs(factory, policy, probe, serves=serves),
                           interval_s=min(policy.probe_s, settings.sweep_interval_s))
    _prober.start()


def _probe_once(settings: Settings, probe: ReadRequest | None) -> str | None:
    """One probe read of this worker's upstream: None when answered, else why not."""
    from app.runs.half_open import PROBE_TIMEOUT_S, probe_read

    async def once() -> str | None:
        upstream = make_upstream_for(settings)
        try:
            return await probe_read(upstream, probe, PROBE_TIMEOUT_S)
        finally:
            await upstream.aclose()

    return asyncio.run(once())


def stop_sweeper() -> None:
    global _sweeper, _prober
    for thread in (_sweeper, _prober):
        if thread is not None:
            thread.stop()
    _sweeper = _prober = None
