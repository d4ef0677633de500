"""The queue names, task names and Redis keys now live in ``app.queues`` (shared with the
publishing side, which never imports ``workers/``); re-exported here for older imports."""

from __future__ import annotations

from app.queues import (
    ANSWERS_QUEUE,
    BROKER_EPOCH_KEY,
    BROKER_RECOVERED_KEY,
    QUEUE,
    QUEUE_PREFIX,
    SWEEP_LOCK_ID,
    SWEEP_LOCK_KEY,
    TASK_RUN_CHUNK,
    queue_for,
    queue_of_run,
)

__all__ = [
    "ANSWERS_QUEUE",
    "BROKER_EPOCH_KEY",
    "BROKER_RECOVERED_KEY",
    "QUEUE",
    "QUEUE_PREFIX",
    "SWEEP_LOCK_ID",
    "SWEEP_LOCK_KEY",
    "TASK_RUN_CHUNK",
    "queue_for",
    "queue_of_run",
]
