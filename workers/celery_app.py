"""``Celery("dreads")`` with the reliability settings, and each process's resources.

Delivery is at-least-once (late acks, reject on a lost child, prefetch 1); results are
exactly-once in SQL (leases + the unique answers constraint). Redis is a disposable transport:
the sweeper (a thread in each worker's main process, one active at a time) re-publishes from SQL
whatever Redis lost. Time limits: soft < hard < visibility timeout.

Per process (never across a fork): the SQLAlchemy engine, one event loop kept for the
process's life, the upstream client and the tokenizer, built in ``worker_process_init`` (or on
first use in a pool without children) and closed at shutdown. Before a worker consumes, its
main process waits for the upstream to answer a probe read (``celeryd_after_setup``).

Routing: a run's chunks go to the queue of its model and canvas (``queue_for``); once its
upstream answered, a worker consumes only the queue of what that upstream serves (added in
``celeryd_after_setup``), so a pod never takes work its model server cannot read. A run
answered by a decision endpoint goes to ``dreads.answers``, consumed only by answers workers
(``DREADS_WORKER_ANSWERS``, ``dreads worker --answers``): they wait for no model server, build
no upstream, and split each run's endpoint budget among their pool processes.

Metrics (``app.metrics``): with ``DREADS_METRICS_PORT`` set, the main process serves
``/metrics`` for itself and its pool children (multiprocess mode: ``dreads worker`` sets
``PROMETHEUS_MULTIPROC_DIR`` up before Celery starts), from before the upstream wait on.

``celery -A workers.celery_app worker`` works as well as ``dreads worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals
from kombu import Queue
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.errors import ConfigError
from workers.constants import QUEUE, TASK_RUN_CHUNK

__all__ = ["ProcessState", "app", "celery_config", "make_celery", "process_state"]

log = logging.getLogger("dreads.worker")

#: Seconds of warm phase before a cold shutdown, so running chunks can finish or be restored.
SOFT_SHUTDOWN_S = 30.0
#: Recycle pool children after this many chunks (contains leaks).
MAX_TASKS_PER_CHILD = 200


def time_limits(settings: Settings) -> tuple[int, int, int]:
    """(soft, hard, visibility) in seconds; refuses an order other than soft < hard < vis."""
    hard = settings.task_time_limit_s
    soft = max(1, hard - max(1, min(60, hard // 10)))
    visibility = settings.visibility_timeout_s
    if not soft < hard < visibility:
        raise ConfigError(
            f"the Celery visibility timeout ({visibility} s) must exceed the task time limit "
            f"({hard} s), or Redis re-delivers running chunks; set DREADS_VISIBILITY_TIMEOUT_S "
            f"above DREADS_TASK_TIME_LIMIT_S (e.g. twice as large)"
        )
    return soft, hard, visibility


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration for ``settings`` (see the research notes, section 1)."""
    soft, hard, visibility = time_limits(settings)
    transport = {"visibility_timeout": visibility, "unacked_restore_throttle": 1,
                 "unacked_restore_interval": 10}
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": transport,
        "result_backend_transport_options": {"visibility_timeout": visibility},
        "visibility_timeout": visibility,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_soft_time_limit": soft,
        "task_time_limit": hard,
        "worker_soft_shutdown_timeout": SOFT_SHUTDOWN_S,
        "worker_max_tasks_per_child": MAX_TASKS_PER_CHILD,
        "worker_proc_alive_timeout": 120,
        "worker_send_task_events": True,
        # No "task-sent" event per published chunk: it is a second Redis publish (to the
        # events fanout) for each of a million-decision run's 15,625 messages, half of
        # submit's publishing. Flower lists a chunk once a worker receives it.
        "task_send_sent_event": False,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE,
        "task_queues": (Queue(QUEUE, routing_key=QUEUE),),
        "task_routes": {TASK_RUN_CHUNK: {"queue": QUEUE, "routing_key": QUEUE}},
        "task_create_missing_queues": True,
        "worker_hijack_root_logger": False,
    }


def make_celery(*, broker_url: str | None = None, settings: Settings | None = None) -> Celery:
    """A configured ``Celery("dreads")``; ``broker_url`` overrides the settings' broker. The
    producer and the sweeper publish with it (by task name: no task module needed)."""
    settings = settings or get_settings()
    celery = Celery("dreads", include=["workers.tasks"])
    config = celery_config(settings)
    if broker_url:
        config["broker_url"] = broker_url
    celery.conf.update(config)
    return celery


#: The app of ``celery -A workers.celery_app worker`` (settings read at this entry point).
app = make_celery()


@dataclass
class ProcessState:
    """One worker process's resources, built after the fork and kept for the process's life."""

    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    loop: asyncio.AbstractEventLoop
    upstream: Any  #: app.upstream.base.Upstream (None in an answers worker)
    tokenizer: Any  #: app.engine.TextTokenizer
    probe: Any  #: app.engine.ReadRequest, the readiness probe
    owner: str
    endpoints: Any = None  #: app.sources.EndpointPool: the decision endpoints of its runs

    @property
    def built_here(self) -> bool:
        """Built in this process (not inherited across a fork): ``owner`` ends with our pid."""
        return self.owner.endswith(f":{os.getpid()}")

    def close(self) -> None:
        try:
            if self.upstream is not None:
                self.loop.run_until_complete(self.upstream.aclose())
            if self.endpoints is not None:
                self.loop.run_until_complete(self.endpoints.aclose())
        except Exception:  # shutting down: log, never raise
            log.warning("closing the upstream failed", exc_info=True)
        self.engine.dispose()
        self.loop.close()


_state: ProcessState | None = None


def build_state(settings: Settings) -> ProcessState:
    from app.sources import EndpointPool
    from app.store.db import make_engine, make_sessionmaker
    from workers.resources import make_probe, make_tokenizer, make_upstream_for

    engine = make_engine(settings.database_url)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    tokenizer = make_tokenizer(settings)
    answers = settings.worker_answers
    return ProcessState(settings=settings, engine=engine, session_factory=make_sessionmaker(engine),
                        loop=loop, upstream=None if answers else make_upstream_for(settings),
                        tokenizer=tokenizer,
                        probe=None if answers else make_probe(settings, tokenizer),
                        owner=f"{socket.gethostname()}:{os.getpid()}",
                        endpoints=EndpointPool.from_settings(share=settings.worker_processes))


def process_state() -> ProcessState:
    """This process's resources (built on first use in pools without a process-init signal)."""
    global _state
    if _state is None or not _state.built_here:
        _state = build_state(get_settings())
    return _state


@signals.worker_process_init.connect
def _init_process(**_: Any) -> None:
    global _state
    _state = None
    process_state()
    log.info("worker process %s ready", os.getpid())


@signals.worker_process_shutdown.connect
def _close_process(**_: Any) -> None:
    from app.metrics.exporter import mark_process_dead

    global _state
    if _state is not None and _state.built_here:
        _state.close()
    _state = None
    mark_process_dead(os.getpid())


@signals.celeryd_after_setup.connect
def _wait_for_upstream(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Main process, logging set up, before the pool and the consumer start: block until the
    upstream answers a probe read, then consume the queue of what it serves."""
    from app.metrics import set_upstream_ready, start_exporter
    from workers.resources import answers_worker_setup, served_queue, wait_upstream_ready

    settings = get_settings()
    if settings.metrics_port:
        start_exporter(settings.metrics_host, settings.metrics_port)
    if settings.worker_answers:
        queue = answers_worker_setup(getattr(instance, "concurrency", None))
    else:
        set_upstream_ready(settings.upstream, False)
        wait_upstream_ready(settings)
        set_upstream_ready(settings.upstream, True)
        queue = served_queue(get_settings())
    if instance is not None:
        queues = instance.app.amqp.queues
        queues.select_add(queue)
        if QUEUE in queues.consume_from and queue != QUEUE:
            queues.deselect([QUEUE])
        log.info("worker %s consumes %s", sender, queue)


@signals.worker_ready.connect
def _start_sweeper(sender: Any = None, **_: Any) -> None:
    from workers.resources import start_sweeper

    start_sweeper(app, get_settings())


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    from workers.resources import stop_sweeper

    stop_sweeper()
