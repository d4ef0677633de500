"""``Celery("dreads")`` with the reliability settings, and each process's resources.

Delivery is at-least-once (late acks, reject on a lost child, prefetch 1); results are
exactly-once in SQL (leases + the unique answers constraint). Redis is a disposable transport:
the sweeper (a thread in each worker's main process, one active at a time) re-publishes from SQL
whatever Redis lost. Time limits: soft < hard < visibility timeout.

Per process (never across a fork): the SQLAlchemy engine, one event loop kept for the
process's life and run in a thread of its own, the upstream client and the tokenizer, built in
``worker_process_init`` (or on first use in a pool without children) and closed at shutdown.
A chunk task runs its chunk on that loop and returns once its last decisions are left running
(``app.runs.chunk.run_chunk``'s hand-off): the next chunk starts beside them, so the model server
is never left with only a chunk's slowest decisions. The leases of those decisions are still
held and renewed; at shutdown the process waits for them. Before a worker consumes, its
main process waits for the upstream to answer a probe read (``celeryd_after_setup``).

Routing: a run's chunks go to the queue of its model and canvas (``queue_for``); once its
upstream answered, a worker consumes only the queue of what that upstream serves (added in
``celeryd_after_setup``), so a pod never takes work its model server cannot read. A run
answered by a decision endpoint goes to ``dreads.answers``, consumed only by answers workers
(``DREADS_WORKER_ANSWERS``, ``dreads worker --answers``): they wait for no model server, build
no upstream, and split each run's endpoint budget among their pool processes.

Metrics (``app.telemetry``): with ``DREADS_METRICS_PORT`` set, the main process serves
``/metrics`` for itself and its pool children (multiprocess mode: ``dreads worker`` sets
``PROMETHEUS_MULTIPROC_DIR`` up before Celery starts), from before the upstream wait on.

``celery -A workers.celery_app worker`` works as well as ``dreads worker``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from celery import Celery, signals

from app.broker.config import MAX_TASKS_PER_CHILD, SOFT_SHUTDOWN_S, celery_config, time_limits
from app.broker.names import ANSWERS_QUEUE, QUEUE
from app.config import Settings, get_settings
from app.connect.plugins import load_plugins
from app.store.types import Engine, SessionFactory

if TYPE_CHECKING:
    from app.runs.chunk import Answerers, ChunkPolicy

__all__ = ["MAX_TASKS_PER_CHILD", "SOFT_SHUTDOWN_S", "ProcessState", "celery_config",
           "get_app", "make_celery", "process_state", "time_limits", "use_settings",
           "worker_settings"]

log = logging.getLogger("dreads.worker")
T = TypeVar("T")


def make_celery(*, broker_url: str | None = None, settings: Settings | None = None) -> Celery:
    """The worker's ``Celery("dreads")``: ``app.broker.celery_config`` plus the task module
    (``workers.tasks``); ``broker_url`` overrides the settings' broker. Publishers use the
    send-only ``app.broker.client.make_client`` instead."""
    from app.upstream.log_redaction import redact_logs

    redact_logs()  # a broker, database or upstream URL's password never in a worker's log
    settings = settings or get_settings()
    celery = Celery("dreads", include=["workers.tasks"])
    config = celery_config(settings)
    if broker_url:
        config["broker_url"] = broker_url
    celery.conf.update(config)
    return celery


_app: Celery | None = None


def get_app() -> Celery:
    """The app of ``celery -A workers.celery_app worker``, built on first use (settings read
    at this entry point), never at import."""
    global _app
    if _app is None:
        load_plugins()  # installed kinds and sources, inherited by the pool's children
        _app = make_celery()
    return _app


def __getattr__(name: str) -> Any:
    # ``celery -A workers.celery_app`` looks up ``app``: build it then, not at import.
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class ProcessState:
    """One worker process's resources, built after the fork and kept for the process's life."""

    settings: Settings
    engine: Engine
    session_factory: SessionFactory
    loop: asyncio.AbstractEventLoop
    answerers: Answerers  #: its upstream (None in an answers worker), tokenizer, endpoints
    policy: ChunkPolicy
    owner: str

    thread: threading.Thread | None = None  #: runs ``loop``
    #: chunks handed off by their task and still running on the loop
    running: set[concurrent.futures.Future[Any]] = field(default_factory=set)

    @property
    def built_here(self) -> bool:
        """Built in this process (not inherited across a fork): ``owner`` ends with our pid."""
        return self.owner.endswith(f":{os.getpid()}")

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on this process's loop; its future (kept until done)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self.running.add(future)
        future.add_done_callback(self.running.discard)
        return future

    def close(self) -> None:
        pending = list(self.running)
        if pending:  # decisions left running by handed-off chunks: let them finish
            log.info("waiting for %d chunk(s) still running", len(pending))
            concurrent.futures.wait(pending, timeout=SOFT_SHUTDOWN_S)
        try:
            if self.answerers.upstream is not None:
                self.submit(self.answerers.upstream.aclose()).result(timeout=10)
            if self.answerers.endpoints is not None:
                self.submit(self.answerers.endpoints.aclose()).result(timeout=10)
        except Exception:  # shutting down: log, never raise
            log.warning("closing the upstream failed", exc_info=True)
        self.engine.dispose()
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not None:
            self.thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


_state: ProcessState | None = None
#: This worker's settings once its main process resolved them (the served model, its pool
#: size); forked pool children inherit it. None: ``get_settings()`` (DREADS_*).
_settings: Settings | None = None


def worker_settings() -> Settings:
    """The settings this worker runs with: the resolved ones, else ``DREADS_*``."""
    return _settings if _settings is not None else get_settings()


def use_settings(settings: Settings) -> Settings:
    """Keep ``settings`` as this worker's (its pool children inherit them at fork)."""
    global _settings
    _settings = settings
    return settings


#: How long a chunk that met a down upstream waits for it before the worker takes the next one.
RECOVER_WAIT_S = 60.0


def build_state(settings: Settings) -> ProcessState:
    from app.config import run_env
    from app.images import ImageCache
    from app.runs.answer import EndpointPool
    from app.runs.budget import PodMeter
    from app.runs.chunk import Answerers
    from app.runs.settings import chunk_policy, endpoint_options, image_policy
    from app.store.db import make_engine, make_sessionmaker
    from workers.resources import make_probe, make_tokenizer, make_upstream_for

    engine = make_engine(settings.database_url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="dreads-loop", daemon=True)
    thread.start()
    tokenizer = make_tokenizer(settings)
    answers = settings.worker_answers
    env = run_env(settings)
    answerers = Answerers(
        upstream=None if answers else make_upstream_for(settings), tokenizer=tokenizer,
        endpoints=EndpointPool(endpoint_options(env), share=settings.worker_processes),
        probe=None if answers else make_probe(settings, tokenizer),
        images=ImageCache(image_policy(env)),
        meter=PodMeter(settings.gpu_price_hour, share=settings.worker_processes))
    return ProcessState(settings=settings, engine=engine, session_factory=make_sessionmaker(engine),
                        loop=loop, answerers=answerers,
                        policy=chunk_policy(env, recover_wait_s=RECOVER_WAIT_S),
                        owner=f"{socket.gethostname()}:{os.getpid()}", thread=thread)


def process_state() -> ProcessState:
    """This process's resources (built on first use in pools without a process-init signal)."""
    global _state
    if _state is None or not _state.built_here:
        _state = build_state(worker_settings())
    return _state


@signals.worker_process_init.connect
def _init_process(**_: Any) -> None:
    global _state
    _state = None
    process_state()
    log.info("worker process %s ready", os.getpid())


@signals.worker_process_shutdown.connect
def _close_process(**_: Any) -> None:
    from app.telemetry.exporter import mark_process_dead

    global _state
    if _state is not None and _state.built_here:
        _state.close()
    _state = None
    mark_process_dead(os.getpid())


@signals.celeryd_after_setup.connect
def _wait_for_upstream(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Main process, logging set up, before the pool and the consumer start: block until the
    upstream answers a probe read, then consume the queue of what it serves."""
    from app.telemetry import set_upstream_ready, start_exporter
    from workers.resources import answers_worker_setup, served_queue, wait_upstream_ready

    settings = worker_settings()
    if settings.metrics_port:
        start_exporter(settings.metrics_host, settings.metrics_port)
    if settings.worker_answers:
        use_settings(answers_worker_setup(settings, getattr(instance, "concurrency", None)))
        queue = ANSWERS_QUEUE
    else:
        set_upstream_ready(settings.upstream, False)
        settings = use_settings(wait_upstream_ready(settings))
        set_upstream_ready(settings.upstream, True)
        queue = served_queue(settings)
    if instance is not None:
        queues = instance.app.amqp.queues
        queues.select_add(queue)
        if QUEUE in queues.consume_from and queue != QUEUE:
            queues.deselect([QUEUE])
        log.info("worker %s consumes %s", sender, queue)


@signals.worker_ready.connect
def _start_sweeper(sender: Any = None, **_: Any) -> None:
    from workers.resources import start_sweeper

    start_sweeper(getattr(sender, "app", None) or get_app(), worker_settings())


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    from workers.resources import stop_sweeper

    stop_sweeper()
