"""The Celery configuration built from ``Settings``, for both sides of the queue.

The worker (``workers.celery_app``, which adds its task module and process hooks) and every
publisher (submit, the sweeper, the API's queue executor, through ``app.broker.client``) build
their Celery app from ``celery_config(settings)``. Building it opens no connection: kombu
connects on the first publish.

Delivery is at-least-once (late acks, reject on a lost child, prefetch 1); time limits are
soft < hard < visibility timeout, or Redis re-delivers running chunks.
"""

from __future__ import annotations

from typing import Any

from kombu import Queue

from app.broker.names import QUEUE, TASK_RUN_CHUNK
from app.config import Settings
from app.errors import ConfigError

__all__ = ["MAX_TASKS_PER_CHILD", "SOFT_SHUTDOWN_S", "celery_config", "time_limits"]

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
    """The Celery configuration for ``settings`` (workers and publishers alike)."""
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
